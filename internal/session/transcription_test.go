package session

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// recSink is a sink that also keeps every event type, to check what never came.
type recSink struct {
	sink
	mu    sync.Mutex
	types []string
}

func (r *recSink) Send(ev Event) error {
	r.mu.Lock()
	r.types = append(r.types, ev.typ())
	r.mu.Unlock()
	return r.sink.Send(ev)
}

func (r *recSink) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.types...)
}

func startTranscription(t *testing.T, beta bool, patch ConfigPatch) (*Session, *recSink, *fakeEngine, func() string) {
	t.Helper()
	eng := &fakeEngine{t: t}
	m := NewManager(ManagerConfig{MaxSessions: 1}, &fakeBackend{eng}, zap.NewNop())
	sk := &recSink{sink: sink{ch: make(chan Event, 1024)}}
	slot, err := m.Acquire(context.Background())
	require.NoError(t, err)
	s := m.NewSession(slot, Options{Transcription: true, Beta: beta}, sk)
	done := make(chan string, 1)
	go func() {
		reason := s.Run(context.Background(), &UpdateSession{Patch: patch, Transcription: beta})
		slot.Release()
		done <- reason
	}()
	return s, sk, eng, func() string { return <-done }
}

// A transcription session: its object is realtime.transcription_session, a commit gets the
// item, one delta and completed, and nothing ever answers (no response.*, no engine respond).
func TestTranscriptionSessionTranscribesAndNeverResponds(t *testing.T) {
	s, sk, eng, wait := startTranscription(t, false, ConfigPatch{Type: ptr("transcription"), TurnDetectionSet: true,
		InputFormat: &AudioFormat{Type: "pcm16", Rate: 16000}})
	created := sk.until(t, "session.created")
	sess := created.wire()["session"].(map[string]any)
	require.Equal(t, "realtime.transcription_session", sess["object"])
	require.Equal(t, "transcription", sess["type"])
	require.NotContains(t, sess, "instructions")
	updated := sk.until(t, "session.updated")
	require.Nil(t, updated.wire()["session"].(map[string]any)["audio"].(map[string]any)["input"].(map[string]any)["turn_detection"])

	ctx := context.Background()
	require.NoError(t, s.Submit(ctx, &AppendAudio{Base: Base{Kind: "input_audio_buffer.append"}, Data: make([]byte, 6400)}))
	// response_create is a conversation's: a transcription session's commit never answers.
	require.NoError(t, s.Submit(ctx, &CommitInput{ResponseCreate: ptr(true)}))
	committed := sk.until(t, "input_audio_buffer.committed")
	delta := sk.until(t, "conversation.item.input_audio_transcription.delta")
	require.Equal(t, committed.wire()["item_id"], delta.wire()["item_id"])
	require.Equal(t, "hello", delta.wire()["delta"])
	done := sk.until(t, "conversation.item.input_audio_transcription.completed")
	require.Equal(t, "hello", done.wire()["transcript"])

	for _, c := range []Command{&CreateResponse{Base: Base{ID: "evt_r", Kind: "response.create"}},
		&CreateItem{Base: Base{ID: "evt_i", Kind: "conversation.item.create"}, Role: "user", Text: "hi"}} {
		require.NoError(t, s.Submit(ctx, c))
		e := sk.until(t, "error")
		require.Equal(t, "invalid_value", e.wire()["error"].(map[string]any)["code"])
		require.Equal(t, "type", e.wire()["error"].(map[string]any)["param"])
	}
	for _, bad := range []struct {
		patch ConfigPatch
		param string
	}{
		{ConfigPatch{Type: ptr("realtime")}, "session.type"},
		{ConfigPatch{Instructions: ptr("be brief")}, "session.instructions"},
		{ConfigPatch{TranscriptionSet: true}, "session.audio.input.transcription"},
	} {
		require.NoError(t, s.Submit(ctx, &UpdateSession{Base: Base{ID: "evt_u"}, Patch: bad.patch}))
		e := sk.until(t, "error")
		require.Equal(t, bad.param, e.wire()["error"].(map[string]any)["param"])
	}
	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	require.Equal(t, ReasonClientClose, wait())
	for _, typ := range sk.seen() {
		require.NotContains(t, typ, "response.", "a transcription session never responds")
	}
	require.NotContains(t, eng.list(), "respond")
}

// Beta: transcription_session.created / .updated, and the beta object shape.
func TestTranscriptionSessionBetaNames(t *testing.T) {
	s, sk, _, wait := startTranscription(t, true, ConfigPatch{TurnDetectionSet: true})
	created := sk.until(t, "transcription_session.created")
	require.Equal(t, "realtime.transcription_session", created.wire()["session"].(map[string]any)["object"])
	updated := sk.until(t, "transcription_session.updated")
	require.Contains(t, updated.wire()["session"].(map[string]any), "input_audio_transcription")
	require.NoError(t, s.Submit(context.Background(), &CloseSession{}))
	require.Equal(t, ReasonClientClose, wait())
}

// A conversation session refuses to become a transcription session, and
// transcription_session.update.
func TestConversationRefusesTranscription(t *testing.T) {
	s, sk, _, wait := startSession(t, &fakeEngine{t: t}, time.Minute)
	ctx := context.Background()
	require.NoError(t, s.Submit(ctx, &UpdateSession{Base: Base{ID: "a"}, Patch: ConfigPatch{Type: ptr("transcription")}}))
	require.Equal(t, "session.type", sk.until(t, "error").wire()["error"].(map[string]any)["param"])
	require.NoError(t, s.Submit(ctx, &UpdateSession{Base: Base{ID: "b"}, Transcription: true}))
	require.Equal(t, "type", sk.until(t, "error").wire()["error"].(map[string]any)["param"])
	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	require.Equal(t, ReasonClientClose, wait())
}

// The engine's outputs lag the session: deltas of an utterance can come after the session
// committed it (they belong to that item, not to a new one), after its final transcript went out
// (stale: dropped), or after a clear discarded their audio (dropped); the next utterance's
// deltas may start while the previous item's final pass runs. In every case the deltas of an
// item concatenate to its transcript.
func TestTranscriptDeltasFollowTheEngineOrder(t *testing.T) {
	m := NewManager(ManagerConfig{MaxSessions: 1}, &fakeBackend{&fakeEngine{t: t}}, zap.NewNop())
	sk := &recSink{sink: sink{ch: make(chan Event, 64)}}
	slot, err := m.Acquire(context.Background())
	require.NoError(t, err)
	defer slot.Release()
	s := m.NewSession(slot, Options{Transcription: true}, sk) // not run: the test is the actor
	transcriptOut := func() { s.routeOutput(duplex.Output{Kind: duplex.OutTranscript, Text: "x"}) }
	deltaOut := func(text string) {
		s.routeOutput(duplex.Output{Kind: duplex.OutTranscriptDelta, Text: text})
	}

	// Utterance 1: a delta, the commit, a late delta, then the final (job result) before the
	// Transcript output, and one more stale delta.
	deltaOut("go")
	first := commitAudioItem(s, 1000)
	s.tx.endUtterance(first.ID, s.link.opts.TranscriptDeltas)
	deltaOut(" forward")
	s.tx.completed(first.ID, duplex.Transcription{Text: "go forward ten"})
	s.run(trimHistory{})
	deltaOut(" ten") // stale: the final went out
	transcriptOut()
	// Utterance 2 is cleared: its late deltas (before the discard's mark) are dropped.
	deltaOut("turn")
	s.tx.dropOpen(&s.inputAudio.speechItemID, s.link.opts.TranscriptDeltas)
	s.tx.endUtterance("", s.link.opts.TranscriptDeltas)
	deltaOut(" left")
	deltaOut("") // the discard's mark
	// Utterance 3: deltas start before utterance 4's... the final of 3 comes after 4 began.
	deltaOut("stop")
	third := commitAudioItem(s, 1000)
	s.tx.endUtterance(third.ID, s.link.opts.TranscriptDeltas)
	transcriptOut()
	deltaOut("go")
	s.tx.completed(third.ID, duplex.Transcription{Text: "stop here"})
	s.run(trimHistory{})

	deltas := map[string]string{}
	for _, ev := range sk.events {
		if ev.typ() == "conversation.item.input_audio_transcription.delta" {
			deltas[ev.wire()["item_id"].(string)] += ev.wire()["delta"].(string)
		}
	}
	require.Equal(t, "go forward ten", deltas[first.ID])
	require.Equal(t, "stop here", deltas[third.ID])
	require.Len(t, deltas, 4, "%v", deltas) // the cleared utterance's item and utterance 4's
	for id, d := range deltas {
		if id != first.ID && id != third.ID {
			require.Contains(t, []string{"turn", "go"}, d, "no late word of another utterance: %v", deltas)
		}
	}
}

// optsBackend is fakeBackend that also hands the test the options each stream is opened with.
type optsBackend struct {
	fakeBackend
	opened chan duplex.Options
}

func (b *optsBackend) Open(ctx context.Context, f requestclient.Fence, o duplex.Options, out func(duplex.Output)) (Engine, error) {
	eng, err := b.fakeBackend.Open(ctx, f, o, out)
	b.opened <- o
	return eng, err
}

// A conversation session with input transcription on gets the same deltas as a transcription
// session: the engine stream is asked for them, the words heard before the commit name the item
// the commit then adds, and the deltas concatenate to the completed transcript.
func TestConversationSendsTranscriptDeltas(t *testing.T) {
	eng := &fakeEngine{t: t}
	b := &optsBackend{fakeBackend{eng}, make(chan duplex.Options, 4)}
	m := NewManager(ManagerConfig{MaxSessions: 1}, b, zap.NewNop())
	sk := &recSink{sink: sink{ch: make(chan Event, 1024)}}
	s, wait := runSession(t, m, Options{}, sk, manual16k)
	ctx := context.Background()

	require.NoError(t, s.Submit(ctx, &AppendAudio{Base: Base{Kind: "input_audio_buffer.append"}, Data: make([]byte, 6400)}))
	opened := <-b.opened
	require.True(t, opened.TranscriptDeltas, "the first append opens the stream with deltas")
	require.False(t, opened.TranscribeOnly, "a conversation's transcripts join its conversation")
	eng.out(duplex.Output{Kind: duplex.OutTranscriptDelta, Text: "hel"})
	delta := sk.until(t, "conversation.item.input_audio_transcription.delta")
	require.Equal(t, "hel", delta.wire()["delta"])
	require.EqualValues(t, 0, delta.wire()["content_index"])

	require.NoError(t, s.Submit(ctx, &CommitInput{}))
	committed := sk.until(t, "input_audio_buffer.committed")
	require.Equal(t, delta.wire()["item_id"], committed.wire()["item_id"], "the delta named the item the commit added")
	rest := sk.until(t, "conversation.item.input_audio_transcription.delta")
	require.Equal(t, committed.wire()["item_id"], rest.wire()["item_id"])
	require.Equal(t, "lo", rest.wire()["delta"], "the last delta is the rest of the final transcript")
	done := sk.until(t, "conversation.item.input_audio_transcription.completed")
	require.Equal(t, "hello", done.wire()["transcript"])

	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	require.Equal(t, ReasonClientClose, wait())
}

// With audio.input.transcription null a conversation gets no deltas (OpenAI sends none): the
// stream is not asked for them, and deltas of a stream opened while it was on are dropped, also
// the last one a commit's transcript would send. The session is driven on the test's goroutine
// (it is the actor) so that "nothing was sent" is a fact, not a race.
func TestConversationWithoutTranscriptionSendsNoDeltas(t *testing.T) {
	m := NewManager(ManagerConfig{MaxSessions: 1}, &fakeBackend{&fakeEngine{t: t}}, zap.NewNop())
	sk := &recSink{sink: sink{ch: make(chan Event, 64)}}
	slot, err := m.Acquire(context.Background())
	require.NoError(t, err)
	defer slot.Release()
	s := m.NewSession(slot, Options{}, sk)
	require.True(t, openOptions(&s.settings, s.m.cfg.MaxHistoryBytes).TranscriptDeltas, "on by default")
	s.settings.cfg.TurnDetection = nil
	s.link.opts = openOptions(&s.settings, s.m.cfg.MaxHistoryBytes) // the stream was opened with transcription on

	s.settings.cfg.Transcription = false // then session.update turned it off
	require.False(t, openOptions(&s.settings, s.m.cfg.MaxHistoryBytes).TranscriptDeltas)
	s.routeOutput(duplex.Output{Kind: duplex.OutTranscriptDelta, Text: "go"})
	it := commitAudioItem(s, 1000)
	s.tx.endUtterance(it.ID, s.link.opts.TranscriptDeltas)
	s.routeOutput(duplex.Output{Kind: duplex.OutTranscriptDelta, Text: " on"})
	s.tx.completed(it.ID, duplex.Transcription{Text: "go on"})
	s.run(trimHistory{})
	s.routeOutput(duplex.Output{Kind: duplex.OutTranscript, Text: "go on"})
	for _, typ := range sk.seen() {
		require.NotContains(t, typ, "input_audio_transcription", "transcription is off")
	}
	require.Empty(t, s.tx.deltas, "nothing kept for an item whose deltas were not sent")
	require.Empty(t, s.tx.cuts)

	// Engine-endpointed turns (?duplex=1 auto-response) have no deltas to ask for.
	d := m.NewSession(slot, Options{Duplex: true}, sk)
	require.True(t, d.settings.autoResponse())
	require.False(t, openOptions(&d.settings, d.m.cfg.MaxHistoryBytes).TranscriptDeltas)
}

// deltaEngine is asrEngine that also sends, as the stage does, each appended chunk's "word" (its
// value) as a transcript delta: a new stream starts its utterance's words from the beginning.
type deltaEngine struct{ *asrEngine }

func (d deltaEngine) AppendAudio(ctx context.Context, turn int, pcm []float32) error {
	if err := d.asrEngine.AppendAudio(ctx, turn, pcm); err != nil {
		return err
	}
	heard := d.heardNow()
	word := heard[len(heard)-1]
	if len(heard) > 1 {
		word = " " + word
	}
	d.out(duplex.Output{Kind: duplex.OutTranscriptDelta, Text: word})
	return nil
}

type deltaBackend struct{ streamsBackend }

func (b *deltaBackend) Open(ctx context.Context, f requestclient.Fence, o duplex.Options, out func(duplex.Output)) (Engine, error) {
	e, err := b.streamsBackend.Open(ctx, f, o, out)
	return deltaEngine{e.(*asrEngine)}, err
}

// A session.update before the first commit reopens the early stream (ahead.go), and the new
// stream decodes the buffered utterance again from its start: the words already sent are not
// sent twice, so the deltas still concatenate to the transcript.
func TestReopenedStreamDoesNotRepeatDeltas(t *testing.T) {
	b := &deltaBackend{streamsBackend{t: t}}
	s, sk, wait := startAheadSession(t, b)
	ctx := context.Background()
	appendAudio := func(v float64) { require.NoError(t, s.Submit(ctx, &AppendAudio{Data: pcmOf(v, 1600)})) }
	appendAudio(0.1)
	appendAudio(0.2)
	drainUntilAck(t, s, sk)
	require.NoError(t, s.Submit(ctx, &UpdateSession{Patch: ConfigPatch{Instructions: ptr("Be brief.")}}))
	sk.until(t, "session.updated")
	appendAudio(0.3)
	require.NoError(t, s.Submit(ctx, &CommitInput{}))
	done := sk.until(t, "conversation.item.input_audio_transcription.completed")
	require.Equal(t, "0.1 0.2 0.3", done.wire()["transcript"])
	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	require.Equal(t, ReasonClientClose, wait())

	opts, _ := b.streams()
	require.Len(t, opts, 2, "the update reopened the stream")
	var deltas []string
	for _, ev := range sk.events {
		if ev.typ() == "conversation.item.input_audio_transcription.delta" {
			require.Equal(t, done.wire()["item_id"], ev.wire()["item_id"])
			deltas = append(deltas, ev.wire()["delta"].(string))
		}
	}
	require.Equal(t, []string{"0.1", " 0.2", " 0.3"}, deltas)
}

// itemMetrics records the transcription items the session observed.
type itemMetrics struct {
	mu    sync.Mutex
	items []metrics.TranscriptionItem
}

func (*itemMetrics) AddDetachedSessions(int) {}
func (*itemMetrics) CountPanic(string)       {}
func (*itemMetrics) CountEviction()          {}
func (m *itemMetrics) ObserveTranscriptionItem(r metrics.TranscriptionItem) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.items = append(m.items, r)
}

// Each item of a transcription session is recorded once when it ends, on the statistics clock:
// its commit (the speech end under server VAD), its first delta and delta count, its completed
// or failed time and outcome; with --log-stats the record's table is logged. Items of a manual
// commit have no speech end.
func TestTranscriptionItemRecords(t *testing.T) {
	for _, tc := range []struct {
		name string
		vad  bool
	}{{"server VAD: the commit is the speech end", true}, {"manual commit: no speech end", false}} {
		t.Run(tc.name, func(t *testing.T) {
			now := 1000.0
			rec := &itemMetrics{}
			core, logs := observer.New(zapcore.InfoLevel)
			m := NewManager(ManagerConfig{MaxSessions: 1, LogStats: true, Metrics: rec, WallClock: func() float64 { return now }},
				&fakeBackend{&fakeEngine{t: t}}, zap.New(core))
			sk := &recSink{sink: sink{ch: make(chan Event, 64)}}
			slot, err := m.Acquire(context.Background())
			require.NoError(t, err)
			defer slot.Release()
			s := m.NewSession(slot, Options{Transcription: true}, sk) // not run: the test is the actor
			if !tc.vad {
				s.settings.cfg.TurnDetection = nil
			}
			deltaOut := func(text string) {
				s.routeOutput(duplex.Output{Kind: duplex.OutTranscriptDelta, Text: text})
			}

			deltaOut("go") // while the user speaks
			now = 1000.5
			first := commitAudioItem(s, 1200)
			s.tx.endUtterance(first.ID, s.link.opts.TranscriptDeltas)
			now = 1000.6
			deltaOut(" forward")
			now = 1000.75
			s.tx.completed(first.ID, duplex.Transcription{Text: "go forward ten", RecognizerCPU: 60 * time.Millisecond})
			s.run(trimHistory{})
			now = 1001
			second := commitAudioItem(s, 640)
			s.tx.endUtterance(second.ID, s.link.opts.TranscriptDeltas)
			now = 1001.25
			s.tx.reached(second.ID, true)
			s.tx.failed(second.ID, "engine_error", "engine: boom")

			require.Len(t, rec.items, 2)
			done, failed := rec.items[0], rec.items[1]
			require.Equal(t, first.ID, done.ItemID)
			require.Equal(t, s.id, done.SessionID)
			require.Equal(t, metrics.ItemCompleted, done.Outcome)
			require.InDelta(t, 1200, done.AudioMs, 0)
			require.InDelta(t, 1000.0, done.FirstDelta, 0, "the first delta went out before the commit")
			require.Equal(t, 3, done.Deltas, "go, forward and the final's rest")
			require.Equal(t, "go forward ten", done.Transcript)
			require.InDelta(t, 60, done.RecognizerMs, 1e-9, "the recognizer's CPU time on the item")
			rtf, ok := done.RecognizerRTF()
			require.True(t, ok)
			require.InDelta(t, 0.05, rtf, 1e-9)
			require.InDelta(t, 250, done.CommitToDoneMs(), 1e-6)
			require.InDelta(t, 250, done.SpeechEndToDoneMs(), 1e-6)
			if tc.vad {
				require.InDelta(t, 1000.5, done.SpeechEnd, 0)
			} else {
				require.Zero(t, done.SpeechEnd)
			}
			require.Equal(t, second.ID, failed.ItemID)
			require.Equal(t, metrics.ItemFailed, failed.Outcome)
			require.Equal(t, "engine_error", failed.Error)
			require.Zero(t, failed.Deltas)
			require.InDelta(t, 250, failed.CommitToDoneMs(), 1e-6)
			require.Empty(t, s.tx.times, "ended items leave no timing behind")

			var tables []string
			for _, e := range logs.All() {
				if strings.Contains(e.Message, "TranscriptionItemStats") {
					tables = append(tables, e.Message)
				}
			}
			require.Equal(t, []string{"\n" + metrics.RenderTranscriptionItem(done), "\n" + metrics.RenderTranscriptionItem(failed)}, tables)
		})
	}
}

// A transcription session opens its engine stream transcribe-only: its transcripts are never
// prefilled for a reply that never comes.
func TestTranscriptionSessionOpensTranscribeOnly(t *testing.T) {
	eng := &fakeEngine{t: t}
	b := &optsBackend{fakeBackend{eng}, make(chan duplex.Options, 4)}
	m := NewManager(ManagerConfig{MaxSessions: 1}, b, zap.NewNop())
	sk := &recSink{sink: sink{ch: make(chan Event, 1024)}}
	s, wait := runSession(t, m, Options{Transcription: true}, sk, manual16k)
	ctx := context.Background()
	require.NoError(t, s.Submit(ctx, &AppendAudio{Base: Base{Kind: "input_audio_buffer.append"}, Data: make([]byte, 6400)}))
	opened := <-b.opened
	require.True(t, opened.TranscribeOnly)
	require.True(t, opened.TranscriptDeltas)
	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	require.Equal(t, ReasonClientClose, wait())
}

// commitAudioItem commits audioMs of user audio as an item, as a commit does (the conversation
// adds it, the transcriber takes it, its events go out).
func commitAudioItem(s *Session, audioMs float64) *item {
	it, evs := s.conv.commitAudio(s.inputAudio.takeSpeechID(), audioMs, s.m.cfg.WallClock(), s.epoch)
	s.tx.committed(it.ID)
	s.send(evs...)
	return it
}
