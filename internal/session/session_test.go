package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/omniserve/omniserve/internal/duplex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/requestclient"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeEngine records the calls the session makes and checks their inputs. Its methods run on
// the session's actor and job goroutines, so they check with assert (t.Errorf), never require.
type fakeEngine struct {
	t      *testing.T
	mu     sync.Mutex
	calls  []string
	fences []requestclient.Fence
	panics bool
	out    func(duplex.Output)
	turn   int
	speak  []float32     // 24 kHz audio Respond sends; nil: two 100 ms chunks of silence
	gate   chan struct{} // when set, AppendText waits for it to close (or for its context)
	ids    []string      // the turn id of every input, response and close: "append:1", "clear:1"
}

func (f *fakeEngine) recID(c string, turn int) {
	f.mu.Lock()
	f.ids = append(f.ids, fmt.Sprintf("%s:%d", c, turn))
	f.mu.Unlock()
}

func (f *fakeEngine) idList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ids...)
}

// MarkInputEnd, ClearTurnInput and ObserveBargeIn implement turnStatsMarker.
func (f *fakeEngine) MarkInputEnd(turn int, ts float64) {
	assert.Positive(f.t, turn)
	assert.Positive(f.t, ts)
}
func (f *fakeEngine) ClearTurnInput(turn int)         { f.recID("clear", turn) }
func (f *fakeEngine) ObserveBargeIn(latencyS float64) { assert.GreaterOrEqual(f.t, latencyS, 0.0) }

func (f *fakeEngine) rec(c string) {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
}

func (f *fakeEngine) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeEngine) AppendAudio(_ context.Context, turn int, pcm []float32) error {
	assert.Positive(f.t, turn)
	assert.NotEmpty(f.t, pcm)
	f.recID("append", turn)
	f.rec("append")
	return nil
}
func (f *fakeEngine) Commit(_ context.Context, turn int, _ bool) (duplex.Transcription, error) {
	assert.Positive(f.t, turn)
	f.recID("commit", turn)
	f.rec("commit")
	return duplex.Transcription{Text: "hello"}, nil
}
func (f *fakeEngine) AppendText(ctx context.Context, turn int, role, text string) error {
	assert.Positive(f.t, turn)
	assert.Equal(f.t, "assistant", role)
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.rec("text:" + text)
	return nil
}

// errNoSpec is a test engine's refusal of per-response options (instructions, input, out of
// band, tools): only callEngine runs them.
var errNoSpec = errors.New("per-response options are not supported by this test engine")

// plainSpec reports a response with nothing but its length.
func plainSpec(spec duplex.ResponseSpec) bool {
	return spec.Instructions == nil && !spec.OutOfBand && spec.Input == nil && spec.Tools == nil
}

// Respond numbers responses itself, as an engine that answered input by itself would.
func (f *fakeEngine) Respond(_ context.Context, t requestclient.Turn, spec duplex.ResponseSpec) (int, error) {
	if !plainSpec(spec) {
		return 0, errNoSpec
	}
	turn := t.ID()
	assert.Positive(f.t, turn)
	f.recID("respond", turn)
	f.rec("respond")
	f.mu.Lock()
	f.turn++
	n := f.turn
	f.mu.Unlock()
	if f.speak != nil {
		f.out(duplex.Output{Kind: duplex.OutAudio, Turn: n, Audio: f.speak, Text: "speech "})
		return n, nil
	}
	// The engine speaks: two 100 ms chunks of audio, then (not yet) finished.
	f.out(duplex.Output{Kind: duplex.OutAudio, Turn: n, Audio: make([]float32, 2400), Text: "one "})
	f.out(duplex.Output{Kind: duplex.OutAudio, Turn: n, Audio: make([]float32, 2400), Text: "two "})
	return n, nil
}
func (f *fakeEngine) Signal(_ context.Context, ev string, next requestclient.Fence) error {
	f.rec("signal:" + ev)
	f.mu.Lock()
	f.fences = append(f.fences, next)
	f.mu.Unlock()
	return nil
}
func (f *fakeEngine) Close(_ context.Context, reason string) error {
	f.rec("close:" + reason)
	return nil
}
func (f *fakeEngine) Abort() { f.rec("abort") }
func (f *fakeEngine) MarkTurnArrival(turn int, ts float64) float64 {
	assert.Positive(f.t, turn)
	assert.Positive(f.t, ts)
	f.rec("mark")
	return ts
}
func (f *fakeEngine) BeginTurn(turn int, id string, turnID int, arrival float64) requestclient.Turn {
	assert.Positive(f.t, turn)
	assert.Positive(f.t, turnID)
	assert.Contains(f.t, id, "resp-duplex-")
	assert.Positive(f.t, arrival)
	f.rec("begin")
	if f.panics {
		panic("hook failure")
	}
	return requestclient.NewTurn(turn)
}

// EndTurn records the audio the client acknowledged as played, then the close.
func (f *fakeEngine) EndTurn(t requestclient.Turn, o requestclient.TurnOutcome) (bool, func(context.Context) error) {
	turn := t.ID()
	assert.Positive(f.t, turn)
	assert.GreaterOrEqual(f.t, o.DeliveredMs, 0.0)
	if o.PlayedMs >= 0 {
		f.rec(fmt.Sprintf("played:%.0f", o.PlayedMs))
	}
	f.recID("close", turn)
	f.rec("finalize:" + o.Reason)
	return true, nil
}

type fakeBackend struct{ eng *fakeEngine }

func (b *fakeBackend) SupportsDuplex() bool { return true }
func (b *fakeBackend) Open(_ context.Context, f requestclient.Fence, _ duplex.Options, out func(duplex.Output)) (Engine, error) {
	assert.Contains(b.eng.t, f.SessionID, "duplex-")
	b.eng.out = out
	return b.eng, nil
}

// sink records events; DropStale removes queued model events like the real queue.
type sink struct {
	mu     sync.Mutex
	events []Event
	min    int
	ch     chan Event
}

func (s *sink) Send(ev Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.Model && ev.Epoch < s.min {
		return nil
	}
	s.events = append(s.events, ev)
	s.ch <- ev
	return nil
}

func (s *sink) DropStale(epoch int) {
	s.mu.Lock()
	s.min = max(s.min, epoch)
	s.mu.Unlock()
}

func (s *sink) until(t *testing.T, typ string) Event {
	t.Helper()
	for {
		select {
		case ev := <-s.ch:
			if ev.typ() == typ {
				return ev
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s", typ)
		}
	}
}

func startSession(t *testing.T, eng *fakeEngine, lead time.Duration) (*Session, *sink, *Manager, func() string) {
	t.Helper()
	return startSessionWith(t, eng, lead, manual16k)
}

func startSessionWith(t *testing.T, eng *fakeEngine, lead time.Duration, patch ConfigPatch) (*Session, *sink, *Manager, func() string) {
	t.Helper()
	m := NewManager(ManagerConfig{MaxSessions: 1, MaxOutputLead: lead}, &fakeBackend{eng}, zap.NewNop())
	sk := &sink{ch: make(chan Event, 1024)}
	s, wait := runSession(t, m, Options{Duplex: true}, sk, patch)
	return s, sk, m, wait
}

// testSink is a Sink a test can wait on.
type testSink interface {
	Sink
	until(t *testing.T, typ string) Event
}

// manual16k is the patch most tests open with: turn_detection null (manual turns, the policy
// listens only) and 16 kHz pcm16 input, the engine's own rate.
var manual16k = ConfigPatch{TurnDetectionSet: true, InputFormat: &AudioFormat{Type: "pcm16", Rate: 16000}}

// runSession takes a slot of m, runs a session on sk with patch applied first, and waits for
// its session.updated. wait returns the session's end reason; the slot is released before it is
// reported, so a test that reads it sees the slot returned.
func runSession(t *testing.T, m *Manager, opts Options, sk testSink, patch ConfigPatch) (s *Session, wait func() string) {
	t.Helper()
	slot, err := m.Acquire(context.Background())
	require.NoError(t, err)
	s = m.NewSession(slot, opts, sk)
	done := make(chan string, 1)
	go func() {
		reason := s.Run(context.Background(), &UpdateSession{Patch: patch})
		slot.Release()
		done <- reason
	}()
	sk.until(t, "session.updated")
	return s, func() string { return <-done }
}

func TestCancelFinalizesBeforeEpochAdvance(t *testing.T) {
	eng := &fakeEngine{t: t}
	s, sk, m, wait := startSession(t, eng, 50*time.Millisecond)
	ctx := context.Background()
	pcm := make([]byte, 3200)
	require.NoError(t, s.Submit(ctx, &AppendAudio{Base: Base{Kind: "input_audio_buffer.append"}, Data: pcm}))
	require.NoError(t, s.Submit(ctx, &CommitInput{ResponseCreate: ptr(true)}))
	created := sk.until(t, "response.created")
	require.Equal(t, 0, created.Epoch)
	sk.until(t, "response.output_audio.delta")
	// The client played 50 ms: the first frame ("one ", 0-100 ms), whatever the pacer sent by
	// now (under load the second frame may have gone out too, and the pacing clock passed it).
	require.NoError(t, s.Submit(ctx, &PlaybackAck{PlayedMs: 50}))
	require.NoError(t, s.Submit(ctx, &BargeIn{}))
	done := sk.until(t, "response.done")
	require.Equal(t, "cancelled", done.wire()["response"].(map[string]any)["status"])
	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	require.Equal(t, ReasonClientClose, wait())
	require.Equal(t, 0, m.Active())
	calls := eng.list()
	require.Equal(t, []string{"mark", "mark", "begin", "append", "commit", "respond"}, calls[:6])
	iFin, iSig := indexOf(calls, "finalize:barge_in"), indexOf(calls, "signal:barge_in")
	require.GreaterOrEqual(t, iFin, 0)
	require.Less(t, iFin, iSig, "end_response (finalize) runs before the epoch signal")
	require.Equal(t, 1, eng.fences[0].Epoch, "the signal carries the next epoch")
	require.Equal(t, "close:close", calls[len(calls)-1])
	// History keeps only the text of what was played.
	require.Contains(t, calls, "text:one ")
}

// TestCloseDrainsQueuedJobs: input the session accepted before session.close reaches the engine
// before it closes, even when the engine is slow. The engine holds the first item until 200 ms
// after the close was submitted (without the drain the close cancels both appends).
func TestCloseDrainsQueuedJobs(t *testing.T) {
	eng := &fakeEngine{t: t, gate: make(chan struct{})}
	s, sk, _, wait := startSession(t, eng, time.Minute)
	ctx := context.Background()
	for _, text := range []string{"first", "second"} {
		require.NoError(t, s.Submit(ctx, &CreateItem{Role: "assistant", Text: text}))
		sk.until(t, "conversation.item.done")
	}
	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	time.Sleep(200 * time.Millisecond)
	close(eng.gate)
	require.Equal(t, ReasonClientClose, wait())
	sk.until(t, "session.closed")
	require.Equal(t, []string{"text:first", "text:second", "close:close"}, eng.list())
}

// panicCounter is a ManagerMetrics that records the panics counted.
type panicCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (p *panicCounter) AddDetachedSessions(int) {}
func (p *panicCounter) CountEviction()          {}
func (p *panicCounter) CountPanic(component string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.counts == nil {
		p.counts = map[string]int{}
	}
	p.counts[component]++
}

// TestPanicEndsSessionNotProcess: a panic on the actor (here in a turn hook) is recovered at
// the actor's root: it is counted, the client gets a server_error and session.closed
// {internal_error}, the engine work is aborted and the open turn finalized as an abort.
func TestPanicEndsSessionNotProcess(t *testing.T) {
	eng := &fakeEngine{t: t, panics: true}
	pc := &panicCounter{}
	m := NewManager(ManagerConfig{MaxSessions: 1, MaxOutputLead: time.Minute, Metrics: pc}, &fakeBackend{eng}, zap.NewNop())
	sk := &sink{ch: make(chan Event, 1024)}
	s, wait := runSession(t, m, Options{Duplex: true}, sk, manual16k)
	ctx := context.Background()
	require.NoError(t, s.Submit(ctx, &AppendAudio{Data: make([]byte, 3200)}))
	require.NoError(t, s.Submit(ctx, &CommitInput{ResponseCreate: ptr(true)}))
	e := sk.until(t, "error").wire()["error"].(map[string]any)
	require.Equal(t, "server_error", e["type"])
	require.Equal(t, ReasonInternalError, wait())
	require.Equal(t, ReasonInternalError, sk.until(t, "session.closed").wire()["reason"])
	calls := eng.list()
	require.Contains(t, calls, "abort")
	require.Contains(t, calls, "finalize:abort")
	pc.mu.Lock()
	defer pc.mu.Unlock()
	require.Equal(t, map[string]int{"session": 1}, pc.counts)
}

func TestAdmission(t *testing.T) {
	m := NewManager(ManagerConfig{MaxSessions: 2}, nil, nil)
	a, err := m.Acquire(context.Background())
	require.NoError(t, err)
	b, err := m.Acquire(context.Background())
	require.NoError(t, err)
	_, err = m.Acquire(context.Background())
	require.ErrorIs(t, err, errCapacity)
	a.Release()
	a.Release() // idempotent
	require.Equal(t, 1, m.Active())
	b.Release()
	require.NoError(t, m.Shutdown(context.Background()))
	_, err = m.Acquire(context.Background())
	require.ErrorIs(t, err, errShuttingDown)
}

func TestConfigPatch(t *testing.T) {
	base := Config{Modalities: []string{"text", "audio"}}
	tests := []struct {
		name  string
		patch ConfigPatch
		code  string
	}{
		{"ok formats", ConfigPatch{InputFormat: &AudioFormat{Type: "audio/pcm", Rate: 24000}, OutputFormat: &AudioFormat{Type: "g711_ulaw"}}, ""},
		{"bad input format", ConfigPatch{InputFormat: &AudioFormat{Type: "mp3"}}, "unsupported_audio_format"},
		{"bad rate", ConfigPatch{InputFormat: &AudioFormat{Type: "pcm16", Rate: 96000}}, "unsupported_audio_format"},
		{"low rate", ConfigPatch{InputFormat: &AudioFormat{Type: "pcm16", Rate: 7999}}, "unsupported_audio_format"},
		{"44.1 kHz", ConfigPatch{InputFormat: &AudioFormat{Type: "pcm16", Rate: 44100}}, ""},
		{"11.025 kHz", ConfigPatch{InputFormat: &AudioFormat{Type: "pcm16", Rate: 11025}}, ""},
		{"bad modality", ConfigPatch{Modalities: []string{"video"}}, "invalid_value"},
		{"semantic vad", ConfigPatch{TurnDetectionSet: true, TurnDetection: turnPatch(tdType("semantic_vad"), tdEagerness("high"))}, ""},
		{"bad eagerness", ConfigPatch{TurnDetectionSet: true, TurnDetection: turnPatch(tdType("semantic_vad"), tdEagerness("eager"))}, "invalid_value"},
		{"unknown vad", ConfigPatch{TurnDetectionSet: true, TurnDetection: turnPatch(tdType("magic_vad"))}, "invalid_value"},
		{"negative silence", ConfigPatch{TurnDetectionSet: true, TurnDetection: turnPatch(tdSilenceDurationMs(-1))}, "integer_below_min_value"},
		{"negative padding", ConfigPatch{TurnDetectionSet: true, TurnDetection: turnPatch(tdPrefixPaddingMs(-5))}, "integer_below_min_value"},
		{"threshold above 1", ConfigPatch{TurnDetectionSet: true, TurnDetection: turnPatch(tdThreshold(1.5))}, "invalid_value"},
		{"idle timeout overflow", ConfigPatch{TurnDetectionSet: true, TurnDetection: turnPatch(tdIdleTimeoutMs(1 << 40))}, "invalid_value"},
		{"idle timeout below range", ConfigPatch{TurnDetectionSet: true, TurnDetection: turnPatch(tdIdleTimeoutMs(100))}, "invalid_value"},
		{"max tokens above 4096", ConfigPatch{MaxOutputTokens: ptr(5000)}, "invalid_value"},
		{"empty voice", ConfigPatch{Voice: ptr("")}, "invalid_value"},
		{"long voice", ConfigPatch{Voice: ptr(strings.Repeat("v", 65))}, "invalid_value"},
		{"unknown session type", ConfigPatch{Type: ptr("translation")}, "invalid_value"},
		{"negative idle", ConfigPatch{IdleTimeoutS: ptr(-1.0)}, "invalid_value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.patch.Apply(base)
			if tt.code == "" {
				require.NoError(t, err)
				return
			}
			var fe *FieldError
			require.True(t, errors.As(err, &fe))
			require.Equal(t, tt.code, fe.Code)
			require.NotEmpty(t, fe.Param)
			require.Equal(t, base, got, "a failed patch leaves the session unchanged")
		})
	}
}

func TestDecodeInput(t *testing.T) {
	_, err := DecodeInput([]byte{1, 2, 3}, AudioFormat{Type: "pcm16", Rate: 16000})
	require.ErrorIs(t, err, errBadAudio)
	pcm, err := DecodeInput(make([]byte, 4800), AudioFormat{Type: "pcm16", Rate: 24000})
	require.NoError(t, err)
	require.Len(t, pcm, 1600, "24 kHz → 16 kHz")
	for _, v := range []int16{-32000, -1000, 0, 1000, 32000} {
		require.InDelta(t, float64(v), float64(ulawDecode(ulawEncode(v))), float64(abs(v))/16+40)
		require.InDelta(t, float64(v), float64(alawDecode(alawEncode(v))), float64(abs(v))/16+40)
	}
}

func abs(v int16) int16 {
	if v < 0 {
		return -v
	}
	return v
}

func ptr[T any](v T) *T { return &v }

func indexOf(xs []string, x string) int {
	for i, s := range xs {
		if s == x {
			return i
		}
	}
	return -1
}

func TestTurnDetectionDefaults(t *testing.T) {
	cfg, err := ConfigPatch{TurnDetectionSet: true, TurnDetection: turnPatch(tdType("server_vad"))}.Apply(Config{})
	require.NoError(t, err)
	require.Equal(t, TurnDetection{TurnDetection: duplex.TurnDetection{Type: "server_vad", Threshold: 0.5, PrefixPaddingMs: 300, SilenceDurationMs: 500},
		CreateResponse: true, InterruptResponse: true}, *cfg.TurnDetection)
	for eager, ms := range map[string]int{"low": 1000, "medium": 500, "auto": 500, "high": 250} {
		cfg, err := ConfigPatch{TurnDetectionSet: true, TurnDetection: turnPatch(tdType("semantic_vad"), tdEagerness(eager))}.Apply(Config{})
		require.NoError(t, err)
		require.Equal(t, ms, cfg.TurnDetection.SilenceDurationMs, eager)
	}
	// auto_response is server_vad with create_response; on a session without turn detection
	// it keeps the listen-only overlap (no interrupt_response).
	cfg, err = ConfigPatch{AutoResponse: ptr(true)}.Apply(Config{})
	require.NoError(t, err)
	require.True(t, cfg.TurnDetection.CreateResponse)
	require.False(t, cfg.TurnDetection.InterruptResponse)
	require.Equal(t, policyListenOnly, cfg.OverlapPolicy())
	cfg, err = ConfigPatch{AutoResponse: ptr(true)}.Apply(Config{TurnDetection: defaultTurnDetection()})
	require.NoError(t, err)
	require.True(t, cfg.TurnDetection.InterruptResponse)
	cfg, err = ConfigPatch{AutoResponse: ptr(false)}.Apply(cfg)
	require.NoError(t, err)
	require.False(t, cfg.TurnDetection.CreateResponse)
	require.True(t, cfg.TurnDetection.InterruptResponse)
	f, err := NormalizeInputFormat(AudioFormat{Type: "audio/pcm"})
	require.NoError(t, err)
	require.Equal(t, 24000, f.Rate, "pcm without a rate is 24 kHz")
	f, err = NormalizeInputFormat(AudioFormat{Type: "pcm16", Rate: 16000})
	require.NoError(t, err)
	require.Equal(t, 16000, f.Rate, "explicit rates stay accepted")
}

// effectOf is ev's effect, which must be a T.
func effectOf[T Effect](t *testing.T, ev Event) T {
	t.Helper()
	e, ok := ev.Effect.(T)
	require.True(t, ok, "%s carries a %T", ev.typ(), ev.Effect)
	return e
}

// wireOf is how the OpenAI dialect writes an event: its GA type, its typed payload and its
// frame (without event_id or seq). The translator imports this package, so its hook is set by
// wire_hook_test.go, in the external test package: the session's tests read its effects as the
// OpenAI dialect writes them, and the session itself never does.
var wireOf func(ev Event) (typ string, payload any, frame []byte)

// SetWireForTests installs wireOf (wire_hook_test.go).
func SetWireForTests(f func(ev Event) (typ string, payload any, frame []byte)) { wireOf = f }

// typ is ev's GA event type in the OpenAI dialect.
func (ev Event) typ() string { typ, _, _ := wireOf(ev); return typ }

// payload is ev's OpenAI server event (a protocol.ServerEvent).
func (ev Event) payload() any { _, p, _ := wireOf(ev); return p }

// wire is ev as the client receives it (its payload encoded in its spelling), decoded: what
// tests of the wire shape compare (numbers are float64).
func (ev Event) wire() map[string]any {
	_, _, data := wireOf(ev)
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		panic(err)
	}
	delete(m, "type")
	delete(m, "event_id")
	return m
}
