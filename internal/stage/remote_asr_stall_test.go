package stage

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
)

// stalledASR is a remote /v1/audio/transcriptions that holds every request until release is
// closed (then answers text), or until the client goes away (counted in cut).
type stalledASR struct {
	u       *upstream
	release chan struct{}
	once    sync.Once
	cut     atomic.Int32
}

func newStalledASR(t *testing.T, text string) *stalledASR {
	t.Helper()
	s := &stalledASR{release: make(chan struct{})}
	s.u = newUpstream(t, func(_ int, w http.ResponseWriter, r *http.Request, _ *upstream) {
		// Read the upload first, as a real server does: only then does net/http watch the
		// connection and cancel r.Context() when the client goes away.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-s.release:
			_, _ = io.WriteString(w, `{"text":"`+text+`"}`)
		case <-r.Context().Done():
			s.cut.Add(1)
		}
	})
	t.Cleanup(s.free) // runs before the server's Close, which waits for the handlers
	return s
}

func (s *stalledASR) free() { s.once.Do(func() { close(s.release) }) }

func (s *stalledASR) cfg() RemoteConfig {
	c := s.u.cfg()
	// Longer than the test waits: a call made under the audio lock would block the stream
	// until then, and the stream's calls would fail with a timeout, not pass.
	c.FirstByteTimeout, c.Retries = 30*time.Second, -1
	return c
}

func transcripts(outs []OutputMessage) []string {
	var r []string
	for _, o := range ofKind(outs, duplex.OutTranscript) {
		r = append(r, o.Text)
	}
	return r
}

// TestRemoteASRStalledUpstream: with a remote ASR whose upstream does not answer, the
// utterance's transcription waits on the stream's transcriber, not under the audio lock:
// the appends after the endpoint, a discard, another commit, a response and its cancel
// (barge-in) all complete while the upstream is still stalled. Released, the transcripts come
// in cut order, each committed with its response; closing a stream cuts its stalled call.
func TestRemoteASRStalledUpstream(t *testing.T) {
	t.Parallel()
	speechPCM := goForward(t)
	silence := make([]float32, 16000) // 1 s: past the default silence_duration_ms endpoint
	ctx := context.Background()

	t.Run("appends, commit, cancel and barge-in go on", func(t *testing.T) {
		t.Parallel()
		up := newStalledASR(t, "go forward ten meters")
		rc := up.cfg()
		p, _ := newTestPipeline(t, func(c *PipelineConfig) { c.Remote.ASR = &rc })
		sink := newRecSink(t)
		d, err := p.OpenDuplex(ctx, DuplexOptions{Options: duplex.Options{AutoResponse: true, MaxTokens: 4}, RequestID: "duplex-stalled-asr"}, sink)
		require.NoError(t, err)
		defer d.Close()

		// Speech, then silence: the endpoint's utterance goes to the stalled upstream and the
		// appends after it (the rest of the silence) still return.
		feedUnits(t, d, speechPCM)
		feedUnits(t, d, silence)
		require.Eventually(t, func() bool { return up.u.calls.Load() == 1 }, 10*time.Second, 5*time.Millisecond,
			"the endpoint's utterance was not sent")
		// More speech (a barge-in, as the VAD hears it) and a discard of it.
		feedUnits(t, d, speechPCM[:len(speechPCM)/2])
		require.NoError(t, d.DiscardAudio(ctx))
		// Speech committed by hand: the cut returns at once, its transcript waits. (The
		// silence first ends the VAD's segment the discard cut short.)
		feedUnits(t, d, silence)
		feedUnits(t, d, speechPCM[:len(speechPCM)/2])
		wait, err := d.StartCommit(ctx, 0, false)
		require.NoError(t, err)
		feedUnits(t, d, make([]float32, 2*unitSamples)) // appends after the commit go on
		// A response to a typed message runs and is cancelled while both transcriptions wait.
		require.NoError(t, d.AppendText(ctx, 0, "user", "tell me a long story"))
		turn, err := d.Respond(ctx, 0, 4000)
		require.NoError(t, err)
		require.True(t, sink.waitFor(20*time.Second, func(o []OutputMessage) bool {
			for _, x := range ofKind(o, duplex.OutText) {
				if x.Turn == turn {
					return true
				}
			}
			return false
		}), "the response did not start while the ASR stalled")
		d.CancelResponse(false)
		require.Eventually(t, func() bool { _, _, ok := sink.turnEnd(turn); return ok }, 10*time.Second, 5*time.Millisecond,
			"the cancelled turn did not end")

		select {
		case <-up.release:
			t.Fatal("released early")
		default:
		}
		outs, _, _ := sink.snapshot()
		require.Empty(t, transcripts(outs), "nothing was transcribed yet")
		for _, o := range ofKind(outs, duplex.OutDecision) {
			require.Equal(t, duplex.DecisionListen, o.Decision, "no speak before the transcript")
		}
		require.Equal(t, int32(1), up.u.calls.Load(), "one call at a time, in cut order")

		up.free()
		tr, err := wait(ctx)
		require.NoError(t, err)
		require.Equal(t, "go forward ten meters", tr.Text)
		// Every cut utterance (the endpoint's, the hand commit's, and any endpoint inside the
		// speech fed meanwhile) is transcribed in turn and committed; every one but the hand
		// commit (respond false) speaks, after the cancelled turn.
		require.True(t, sink.waitFor(20*time.Second, func(o []OutputMessage) bool {
			return len(transcripts(o)) == int(up.u.calls.Load()) && len(ofKind(o, duplex.OutFinished)) > 0
		}), "the endpoint's response did not run after its transcript")
		outs, _, _ = sink.snapshot()
		trs := transcripts(outs)
		require.GreaterOrEqual(t, len(trs), 2)
		for _, x := range trs {
			require.Equal(t, "go forward ten meters", x)
		}
		var speak []OutputMessage
		for _, o := range ofKind(outs, duplex.OutDecision) {
			if o.Decision == duplex.DecisionSpeak {
				speak = append(speak, o)
				require.Greater(t, o.Turn, turn)
			}
		}
		require.Len(t, speak, len(trs)-1, "every endpoint speaks, the hand commit without respond does not")
		require.Zero(t, up.cut.Load())
	})

	t.Run("close cuts a stalled transcription", func(t *testing.T) {
		t.Parallel()
		up := newStalledASR(t, "unused")
		rc := up.cfg()
		p, _ := newTestPipeline(t, func(c *PipelineConfig) { c.Remote.ASR = &rc })
		d, err := p.OpenDuplex(ctx, DuplexOptions{RequestID: "duplex-stalled-close"}, newRecSink(t))
		require.NoError(t, err)
		feedUnits(t, d, speechPCM)
		first, err := d.StartCommit(ctx, 0, true)
		require.NoError(t, err)
		feedUnits(t, d, speechPCM)
		second, err := d.StartCommit(ctx, 0, true) // queued behind the stalled one
		require.NoError(t, err)
		require.Eventually(t, func() bool { return up.u.calls.Load() == 1 }, 10*time.Second, 5*time.Millisecond)
		d.Close()
		_, err = first(ctx)
		require.ErrorIs(t, err, ErrClosed)
		_, err = second(ctx)
		require.ErrorIs(t, err, ErrClosed)
		require.Eventually(t, func() bool { return up.cut.Load() == 1 }, 5*time.Second, 5*time.Millisecond,
			"the upstream request stayed open after Close")
	})
}
