package stage

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/speech"
)

// Shared real components: the ASR model takes ~330 ms to load and flite's voice is process-wide,
// so tests share one of each; every test gets its own engine (dummy:tiny loads in milliseconds
// once generated) so that LiveSequences checks are per test.
var (
	testCacheDir string
	testASR      *speech.ASR
	testTTS      *speech.TTS
)

const goForwardPath = "/usr/share/pocketsphinx/test/data/goforward.raw"

func TestMain(m *testing.M) {
	slog.SetLogLoggerLevel(slog.LevelWarn)
	code := func() int {
		dir, err := os.MkdirTemp("", "stage-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		testCacheDir = dir
		if testASR, err = speech.NewASR(speech.ASRConfig{PoolSize: 8}, zap.NewNop()); err != nil {
			fmt.Fprintln(os.Stderr, "loading asr:", err)
			return 1
		}
		defer testASR.Close()
		if testTTS, err = speech.NewTTS(speech.TTSConfig{}); err != nil {
			fmt.Fprintln(os.Stderr, "loading tts:", err)
			return 1
		}
		defer testTTS.Close()
		return m.Run()
	}()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func loadEngine(t testing.TB, mods ...func(*gpu.Config)) *gpu.Runner {
	t.Helper()
	cfg := gpu.Config{
		Model: "dummy:tiny", CacheDir: testCacheDir, Device: "cpu", Threads: 2,
		ContextSize: 8 * 1024, MaxSequences: 8, SeqContext: 1024,
	}
	for _, mod := range mods {
		mod(&cfg)
	}
	r, err := gpu.Load(context.Background(), cfg, zap.NewNop())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	return r
}

// newTestPipeline builds the default graph on real components.
func newTestPipeline(t testing.TB, mod func(*PipelineConfig)) (*Pipeline, *gpu.Runner) {
	t.Helper()
	return newPipelineOn(t, loadEngine(t), mod)
}

// newLongReplyPipeline is newTestPipeline on an engine whose dummy replies run to the max tokens
// they are given (engine.dummy_reply_words set past them), for the tests that count a reply's
// outputs or need it still running: the default dummy reply ends after 8-32 words.
func newLongReplyPipeline(t testing.TB, mod func(*PipelineConfig)) (*Pipeline, *gpu.Runner) {
	t.Helper()
	return newPipelineOn(t, loadEngine(t, func(c *gpu.Config) { c.DummyReplyMin, c.DummyReplyMax = 1<<20, 1<<20 }), mod)
}

func newPipelineOn(t testing.TB, eng *gpu.Runner, mod func(*PipelineConfig)) (*Pipeline, *gpu.Runner) {
	t.Helper()
	cfg := DefaultPipelineConfig()
	if mod != nil {
		mod(&cfg)
	}
	log := zap.NewNop()
	if tt, ok := t.(*testing.T); ok {
		log = zaptest.NewLogger(tt, zaptest.Level(zap.WarnLevel))
	}
	p, err := New(cfg, Deps{Engine: eng, ASR: testASR, TTS: testTTS}, log)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p, eng
}

// goForward is pocketsphinx's test clip "go forward ten meters" (16 kHz s16le mono).
func goForward(t testing.TB) []float32 {
	t.Helper()
	b, err := os.ReadFile(goForwardPath)
	require.NoError(t, err)
	pcm, err := audio.PCM16BytesToFloat32(nil, b)
	require.NoError(t, err)
	return pcm
}

// recSink records every Sink call and fails the test if two calls overlap.
type recSink struct {
	t        testing.TB
	mu       sync.Mutex
	inCall   bool
	outs     []OutputMessage
	sms      []StageMetricsMessage
	txs      []TransferEvent
	ends     []TurnEnd
	smsAtEnd []int
	notify   chan struct{}
	onOut    func(OutputMessage) // optional, called inside OnOutput
	delay    time.Duration       // optional: a slow consumer, so undelivered events pile up
}

func newRecSink(t testing.TB) *recSink {
	return &recSink{t: t, notify: make(chan struct{}, 1)}
}

func (s *recSink) enter() {
	s.mu.Lock()
	if s.inCall {
		s.t.Errorf("overlapping Sink calls")
	}
	s.inCall = true
}

func (s *recSink) leave() {
	s.inCall = false
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *recSink) OnOutput(m OutputMessage) {
	time.Sleep(s.delay)
	s.enter()
	s.outs = append(s.outs, m)
	f := s.onOut
	s.leave()
	if f != nil {
		f(m)
	}
}

func (s *recSink) OnStageMetrics(m StageMetricsMessage) {
	s.enter()
	s.sms = append(s.sms, m)
	s.leave()
}

func (s *recSink) OnTransfer(e TransferEvent) {
	s.enter()
	s.txs = append(s.txs, e)
	s.leave()
}

// OnTurnEnd records the end and how many stage-metrics messages had arrived before it.
func (s *recSink) OnTurnEnd(e TurnEnd) {
	s.enter()
	s.ends = append(s.ends, e)
	s.smsAtEnd = append(s.smsAtEnd, len(s.sms))
	s.leave()
}

// turnEnd returns turn n's end and the stage metrics delivered before it.
func (s *recSink) turnEnd(n int) (TurnEnd, []StageMetricsMessage, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range s.ends {
		if e.Turn == n {
			return e, append([]StageMetricsMessage(nil), s.sms[:s.smsAtEnd[i]]...), true
		}
	}
	return TurnEnd{}, nil, false
}

// waitTurnEnd waits for turn n's end (up to d) and returns the statistics delivered before it.
func (s *recSink) waitTurnEnd(t *testing.T, n int, d time.Duration) []StageMetricsMessage {
	t.Helper()
	var sms []StageMetricsMessage
	require.Eventually(t, func() bool {
		var ok bool
		_, sms, ok = s.turnEnd(n)
		return ok
	}, d, 5*time.Millisecond, "turn %d ended", n)
	return sms
}

func (s *recSink) snapshot() ([]OutputMessage, []StageMetricsMessage, []TransferEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]OutputMessage(nil), s.outs...), append([]StageMetricsMessage(nil), s.sms...), append([]TransferEvent(nil), s.txs...)
}

// waitFor polls the recorded outputs until cond holds or the timeout passes.
func (s *recSink) waitFor(timeout time.Duration, cond func([]OutputMessage) bool) bool {
	deadline := time.After(timeout)
	for {
		outs, _, _ := s.snapshot()
		if cond(outs) {
			return true
		}
		select {
		case <-s.notify:
		case <-deadline:
			return false
		}
	}
}

func finishedTurn(turn int) func([]OutputMessage) bool {
	return func(outs []OutputMessage) bool {
		for _, o := range outs {
			if o.Kind == duplex.OutFinished && o.Turn == turn {
				return true
			}
		}
		return false
	}
}

func ofKind(outs []OutputMessage, k duplex.OutputKind) []OutputMessage {
	var r []OutputMessage
	for _, o := range outs {
		if o.Kind == k {
			r = append(r, o)
		}
	}
	return r
}

func joinText(outs []OutputMessage) string {
	var b strings.Builder
	for _, o := range outs {
		b.WriteString(o.Text)
		b.WriteString(" ")
	}
	return b.String()
}
