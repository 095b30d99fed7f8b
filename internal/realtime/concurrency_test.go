package realtime_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
	"github.com/omniserve/omniserve/internal/testenv"
)

// TestConcurrentAutoResponseSessions streams real-time audio into 16 auto_response sessions at
// once (speech, then silence, repeated) and checks that every session gets decisions and
// transcripts, that the pipeline answers, that no engine failure is counted (issue 27), that
// every session closes cleanly, and that all slots and goroutines come back. Streams last 12 s; -short streams 2 s and checks decisions and clean
// ends only (2 shared cores cannot run 16 real-time ASR streams; see docs/BENCHMARKS.md).
func TestConcurrentAutoResponseSessions(t *testing.T) {
	const sessions = 16
	streamFor := 12 * time.Second
	if testing.Short() {
		streamFor = 2 * time.Second
	}
	failures := &engineFailures{}
	srv := newServer(t, session.ManagerConfig{MaxSessions: sessions, Metrics: failures}, realtime.HandlerConfig{}, nil)
	// The ASR pool builds decoders lazily and one at a time (about a second each, several under
	// -race on a busy machine): without warming, the last sessions of a cold pool waited half a
	// minute for theirs and heard nothing in the window. This test is about steady-state
	// concurrency, so the pool is warm first.
	warmCtx, cancelWarm := context.WithTimeout(context.Background(), 3*time.Minute)
	require.NoError(t, getFixture(t).asr.Warm(warmCtx, sessions))
	cancelWarm()
	t.Logf("engine sequences open before the sessions: %d", getFixture(t).srv.Parts().Engine.LiveSequences())
	speech := testenv.ReadFile(t, "/usr/share/pocketsphinx/test/data/goforward.raw", "pocketsphinx-testdata") // 16 kHz
	before := runtime.NumGoroutine()

	type result struct {
		listens, transcripts, responses int
		err                             string
	}
	// Each goroutine writes only its own slice: results[i] by the speaker, micErrs[i] by the
	// microphone (both once wrote results[i].err, a data race).
	results := make([]result, sessions)
	micErrs := make([]string, sessions)
	var wg sync.WaitGroup
	var clients []*wsClient
	for i := range sessions {
		c := dial(t, srv.url+"?duplex=1", nil)
		// 16 kHz stated: the engine's own rate, so no session pays for resampling (this test is
		// about concurrency) and 3200 bytes are 100 ms, streamed in real time.
		c.update(event{"extra_body": event{"auto_response": true}, "max_response_output_tokens": 4,
			"turn_detection": event{"type": "server_vad"}, "input_audio_format": event{"type": "pcm16", "rate": 16000}})
		wg.Add(2)
		stop := make(chan struct{})
		go func() { // the client's microphone: real-time 100 ms chunks
			defer wg.Done()
			defer close(stop)
			unit := append(append([]byte{}, speech...), make([]byte, 32000)...) // + 1 s of 16 kHz silence
			deadline := time.Now().Add(streamFor)
			for off := 0; time.Now().Before(deadline); off = (off + 100*bytesPerMs) % len(unit) {
				end := min(off+100*bytesPerMs, len(unit))
				if err := c.sendErr(event{"type": "input_audio_buffer.append", "audio": b64(unit[off:end])}); err != nil {
					micErrs[i] = err.Error()
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
		clients = append(clients, c)
		go func() { // the client's speaker: count what comes back, then wait out the last answer
			defer wg.Done()
			var grace <-chan time.Time
			for {
				// After the stream, wait for the user's last words and the answer to them: the
				// answer's response.created follows its transcript, so leaving at the transcript
				// once counted no response at all when every session's ASR lagged the stream.
				if grace != nil && ((testing.Short() && results[i].listens > 0) || (results[i].transcripts > 0 && results[i].responses > 0)) {
					return
				}
				select {
				case e, ok := <-c.events:
					if !ok {
						return
					}
					switch e.str("type") {
					case "response.listen":
						results[i].listens++
					case "conversation.item.input_audio_transcription.completed":
						results[i].transcripts++
					case "response.created":
						results[i].responses++
					case "error":
						results[i].err = e.obj("error").str("code") + ": " + e.obj("error").str("message")
					}
				case <-stop:
					stop = nil
					grace = time.After(20 * time.Second)
				case <-grace:
					return
				}
			}
		}()
	}
	t0 := time.Now()
	wg.Wait()
	t.Logf("streams and answers done after %v", time.Since(t0))
	for i, r := range results {
		t.Logf("session %d: listens %d transcripts %d responses %d err %q send err %q", i, r.listens, r.transcripts, r.responses, r.err, micErrs[i])
	}
	for i, r := range results {
		if r.err != "" || micErrs[i] != "" {
			for _, e := range getFixture(t).warnings.All() {
				t.Logf("server %s: %s %v", e.Level, e.Message, e.ContextMap())
			}
			break
		}
	}
	total := 0
	for i, r := range results {
		require.Empty(t, micErrs[i], "session %d: sending audio", i)
		require.Empty(t, r.err, "session %d", i)
		require.Positive(t, r.listens, "session %d got listen decisions", i)
		if !testing.Short() {
			require.Positive(t, r.transcripts, "session %d heard its user", i)
		}
		total += r.responses
	}
	// The talker (flite, 4 workers) is the bottleneck on 2 cores; with barge-in on speech not
	// every endpoint becomes a voiced answer, but the pipeline must answer.
	if !testing.Short() {
		require.Positive(t, total, "responses")
	}
	// Every engine failure is counted with its cause, also one that no response was there to
	// carry to the client (issue 27's engine_error was seen once and never explained).
	require.Empty(t, failures.list(), "engine failures by cause")
	require.Equal(t, sessions, srv.m.Active())
	// 16 sequences each reserved their window: the shared KV cache was never found full (issue
	// 27's unexplained engine_error was suspected to be "failed to find a memory slot").
	require.Zero(t, getFixture(t).srv.Parts().Engine.KVStats().FullEvents, "the KV cache filled under 16 sessions")
	for _, c := range clients {
		c.send(event{"type": "session.close"})
	}
	t1 := time.Now()
	defer func() { t.Logf("sessions closed in %v", time.Since(t1)) }()
	for _, c := range clients {
		closed, _ := c.until("session.closed", 20*time.Second)
		require.Equal(t, "client_close", closed.str("reason"))
		c.close()
	}
	srv.waitSlots(t, 0)
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= before+2 }, 10*time.Second, 50*time.Millisecond,
		"goroutines: before %d, now %d", before, runtime.NumGoroutine())
}

// engineFailures is the session manager's metrics in this test: it keeps the cause of every
// engine failure the sessions counted.
type engineFailures struct {
	mu     sync.Mutex
	causes []string
}

func (f *engineFailures) AddDetachedSessions(int) {}
func (f *engineFailures) CountPanic(string)       {}
func (f *engineFailures) CountEviction()          {}
func (f *engineFailures) CountEngineError(cause string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.causes = append(f.causes, cause)
}

func (f *engineFailures) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.causes...)
}
