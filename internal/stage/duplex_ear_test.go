package stage

import (
	"context"
	"errors"
	"github.com/omniserve/omniserve/internal/duplex"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/speech"
)

// The ear's tests run without the engine or a recognizer: a scripted VAD and a recording ASR.

// scriptedVAD answers each Process with the next scripted events and reports a fixed trailing
// silence.
type scriptedVAD struct {
	evs    [][]speech.VADEvent
	silent int
	end    int64
	closed bool
}

func (v *scriptedVAD) Process([]float32) ([]speech.VADEvent, error) {
	if len(v.evs) == 0 {
		return nil, nil
	}
	evs := v.evs[0]
	v.evs = v.evs[1:]
	return evs, nil
}

func (v *scriptedVAD) TrailingSilence() (int, int64) { return v.silent, v.end }
func (v *scriptedVAD) Close()                        { v.closed = true }

// recASR records what it is fed; its transcript is text, its partial hypothesis partial.
type recASR struct {
	got      []float32
	partial  string
	text     string
	err      error
	finished int
	closed   bool
}

func (a *recASR) Write(pcm []float32) error { a.got = append(a.got, pcm...); return nil }
func (a *recASR) Finish() (string, error) {
	a.finished++
	a.got = nil
	return a.text, a.err
}
func (a *recASR) Close()          { a.closed = true }
func (a *recASR) Partial() string { return a.partial }

// cutASR is a remote recognizer: its utterance is cut and transcribed elsewhere.
type cutASR struct {
	recASR
	cuts int
}

func (a *cutASR) Cut() (func(context.Context) (string, error), error) {
	a.cuts++
	a.got = nil
	return func(context.Context) (string, error) { return "remote", nil }, nil
}

// ramp is n samples whose values are their stream positions from start, so a test can tell
// which samples reached the ASR.
func ramp(start, n int) []float32 {
	pcm := make([]float32, n)
	for i := range pcm {
		pcm[i] = float32(start + i)
	}
	return pcm
}

func newTestEar(asr asrStream, historyMs int) (*ear, *scriptedVAD) {
	v := &scriptedVAD{}
	return newEar(v, asr, historyMs, 500, zap.NewNop()), v
}

// TestEarFeed: the ASR hears the samples of [fed, end) exactly once, from the history for
// samples already recorded and from the unit being appended for the rest; samples older than
// the history are skipped.
func TestEarFeed(t *testing.T) {
	cases := []struct {
		name      string
		historyMs int
		recorded  int   // samples appended before (stream positions 0..recorded-1)
		fed       int64 // the ASR had heard up to here
		unit      int   // the unit being appended
		end       int64 // feed up to here
		want      [2]int
	}{
		{"the unit only", 100, 1600, 1600, 800, 2400, [2]int{1600, 2400}},
		{"the prefix from the history", 100, 1600, 800, 800, 2400, [2]int{800, 2400}},
		{"older than the history is skipped", 50, 3200, 0, 800, 4000, [2]int{3200 - 800, 4000}},
		{"a stop inside the unit", 100, 1600, 1600, 1600, 2000, [2]int{1600, 2000}},
		{"past the unit is cut to it", 100, 0, 0, 1600, 9999, [2]int{0, 1600}},
		{"nothing new", 100, 1600, 1600, 0, 1600, [2]int{0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			asr := &recASR{}
			e, _ := newTestEar(asr, tc.historyMs)
			for off := 0; off < tc.recorded; off += 400 {
				e.record(ramp(off, min(400, tc.recorded-off)))
			}
			e.fed = tc.fed
			require.NoError(t, e.feedTo(tc.end, ramp(tc.recorded, tc.unit)))
			want := ramp(tc.want[0], tc.want[1]-tc.want[0])
			if len(want) == 0 {
				want = nil
			}
			require.Equal(t, want, asr.got)
			require.Equal(t, len(want) > 0, e.asrHas)
		})
	}
}

// TestEarSegments: a segment's start feeds from its onset, its stop up to the stop's report,
// and a semantic_vad stream with audio pauses instead of ending the utterance.
func TestEarSegments(t *testing.T) {
	cases := []struct {
		name      string
		semOn     bool
		audio     bool // the utterance has audio when the segment stops
		wantPause bool
	}{
		{"server_vad ends the utterance", false, true, false},
		{"semantic_vad pauses", true, true, true},
		{"semantic_vad without audio has nothing to decide", true, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			asr := &recASR{}
			e, _ := newTestEar(asr, 1000)
			e.semOn = tc.semOn
			e.record(ramp(0, 16000)) // 1 s heard before the segment
			e.fed = 16000
			e.sem = &semPause{endMs: 1}
			e.speechStarted(900) // onset 100 ms back, in the history
			require.True(t, e.inSeg)
			require.Nil(t, e.sem, "speech resumed: the pause goes on as the same turn")
			require.Equal(t, int64(16000), e.fed, "fed never moves back")
			if !tc.audio {
				e.fed = 16000 + 1600 // committed by hand mid-segment: nothing left to feed
			}
			e.asrHas = tc.audio
			pause, err := e.speechStopped(1000, ramp(16000, 1600))
			require.NoError(t, err)
			require.Equal(t, tc.wantPause, pause)
			require.False(t, e.inSeg)
		})
	}
}

func TestEarPending(t *testing.T) {
	local, remote := &recASR{}, &cutASR{}
	cases := []struct {
		name   string
		asr    asrStream
		asrHas bool
		want   heard
	}{
		{"nothing heard", local, false, heardNothing},
		{"local", local, true, heardLocal},
		{"remote", remote, true, heardRemote},
		{"remote, nothing heard", remote, false, heardNothing},
	}
	for _, tc := range cases {
		e, _ := newTestEar(tc.asr, 100)
		e.asrHas = tc.asrHas
		require.Equal(t, tc.want, e.pending(), tc.name)
	}
}

// TestEarUtteranceEnds: finish, cut and discard each end the open utterance.
func TestEarUtteranceEnds(t *testing.T) {
	t.Run("finish", func(t *testing.T) {
		asr := &recASR{text: "hello there"}
		e, _ := newTestEar(asr, 100)
		e.asrHas, e.deltaSent, e.partialPrev = true, "hello", "hello there"
		tr, err := e.finish(true)
		require.NoError(t, err)
		require.Equal(t, "hello there", tr.Text)
		require.Nil(t, tr.Logprobs, "the recognizer has none")
		require.False(t, e.asrHas)
		require.Empty(t, e.deltaSent+e.partialPrev)
	})
	t.Run("cut", func(t *testing.T) {
		asr := &cutASR{}
		e, _ := newTestEar(asr, 100)
		e.asrHas = true
		transcribe, err := e.cut()
		require.NoError(t, err)
		text, err := transcribe(context.Background())
		require.NoError(t, err)
		require.Equal(t, "remote", text)
		require.False(t, e.asrHas)
	})
	cases := []struct {
		name       string
		asr        asrStream
		asrHas     bool
		finishErr  error
		wantErr    error
		finished   int
		cuts       int
		wantClosed bool
	}{
		{"nothing to discard", &recASR{}, false, nil, nil, 0, 0, false},
		{"a local utterance", &recASR{}, true, nil, nil, 1, 0, false},
		{"an empty one is no error", &recASR{}, true, audio.ErrEmptyAudio, nil, 1, 0, false},
		{"a failure is", &recASR{}, true, errors.New("boom"), errors.New("boom"), 1, 0, false},
		{"a remote one is cut, not transcribed", &cutASR{}, true, nil, nil, 0, 1, false},
	}
	for _, tc := range cases {
		t.Run("discard/"+tc.name, func(t *testing.T) {
			e, _ := newTestEar(tc.asr, 100)
			e.pos, e.inSeg, e.asrHas, e.sem = 3200, true, tc.asrHas, &semPause{}
			rec := asrRecorder(tc.asr)
			rec.err = tc.finishErr
			e.closeSegment()
			require.Equal(t, int64(3200), e.fed, "what was heard is never fed")
			require.False(t, e.inSeg)
			require.Nil(t, e.sem)
			err := e.discard()
			if tc.wantErr != nil {
				require.EqualError(t, err, tc.wantErr.Error())
			} else {
				require.NoError(t, err)
			}
			require.False(t, e.asrHas)
			require.Equal(t, tc.finished, rec.finished)
			if c, ok := tc.asr.(*cutASR); ok {
				require.Equal(t, tc.cuts, c.cuts)
			}
		})
	}
}

func asrRecorder(a asrStream) *recASR {
	if c, ok := a.(*cutASR); ok {
		return &c.recASR
	}
	return a.(*recASR)
}

// TestEarSettledDelta: a word goes out once two partial hypotheses agree on it.
func TestEarSettledDelta(t *testing.T) {
	asr := &recASR{}
	e, _ := newTestEar(asr, 100)
	e.asrHas = true
	var got []string
	for _, p := range []string{"go", "go for", "go forward", "go forward ten", "go forward ten meters", "go forward ten meters"} {
		asr.partial = p
		got = append(got, e.settledDelta())
	}
	require.Equal(t, []string{"", "", "go", "", " forward", ""}, got)
	require.Equal(t, "go forward", e.deltaSent)
	e.asrHas = false
	asr.partial = "go forward ten meters and more"
	require.Empty(t, e.settledDelta(), "no utterance open: nothing settles")
}

// TestEarPause: semantic_vad's rule on an undecided pause.
func TestEarPause(t *testing.T) {
	rule := duplex.SemanticParams("medium")
	cases := []struct {
		name    string
		pause   semPause
		silence int
		want    string // "" undecided
	}{
		{"scored above the threshold", semPause{scored: true, prob: 0.5}, 300, duplex.EndOfTurnSemantic},
		{"scored below waits", semPause{scored: true, prob: 0.1}, 1000, ""},
		{"scored below until the maximum wait", semPause{scored: true, prob: 0.1}, rule.MaxWaitMs, duplex.EndOfTurnMaxWait},
		{"without an estimate, the silence window", semPause{fallback: true}, rule.SilenceMs, duplex.EndOfTurnSilence},
		{"without an estimate, before the window", semPause{fallback: true}, rule.SilenceMs - 1, ""},
		{"an estimate in flight waits", semPause{}, rule.SilenceMs, ""},
	}
	for _, tc := range cases {
		got := decidePause(&tc.pause, rule, tc.silence)
		if tc.want == "" {
			require.Nil(t, got, tc.name)
			continue
		}
		require.NotNil(t, got, tc.name)
		require.Equal(t, tc.want, got.Reason, tc.name)
		require.Equal(t, tc.silence, got.SilenceMs, tc.name)
		require.Equal(t, tc.pause.scored, got.Scored, tc.name)
	}
}

// TestEarPauseEstimate: a pause asks for an estimate when the thinker is asked, and decides on
// its answer when it comes; a failed estimate leaves the silence window to decide.
func TestEarPauseEstimate(t *testing.T) {
	cases := []struct {
		name   string
		ask    bool
		answer *eotResult
		nowMs  int64
		want   string
	}{
		{"no estimate: silence decides", false, nil, 1000 + 500, duplex.EndOfTurnSilence},
		{"the estimate decides", true, &eotResult{e: EndOfTurn{Prob: 0.9}}, 1000 + 300, duplex.EndOfTurnSemantic},
		{"a failed estimate falls back", true, &eotResult{err: errors.New("no")}, 1000 + 500, duplex.EndOfTurnSilence},
		{"an estimate not yet answered waits", true, nil, 1000 + 500, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			asr := &recASR{partial: "so what"}
			e, _ := newTestEar(asr, 100)
			e.semOn, e.semAsk, e.semRule = true, tc.ask, duplex.SemanticParams("medium")
			text, ask := e.beginPause(1000)
			require.Equal(t, tc.ask, ask)
			if ask {
				require.Equal(t, "so what", text)
				j := &eotJob{text: text, res: make(chan eotResult, 1)}
				e.awaitEstimate(j)
				if tc.answer != nil {
					j.res <- *tc.answer
				}
			}
			endMs, dec := e.decidePause(tc.nowMs)
			if tc.want == "" {
				require.Nil(t, dec)
				require.NotNil(t, e.sem, "still undecided")
				return
			}
			require.Equal(t, int64(1000), endMs)
			require.Equal(t, tc.want, dec.Reason)
			require.Nil(t, e.sem, "decided")
		})
	}
}

// TestEarSpeculationPoint: one try per pause, once its silence reached the preemptive pause.
func TestEarSpeculationPoint(t *testing.T) {
	asr := &recASR{partial: "go forward"}
	e, _ := newTestEar(asr, 100)
	require.Empty(t, e.speculationPoint(200, 100, 1000), "too short a pause")
	require.Equal(t, "go forward", e.speculationPoint(200, 200, 1000))
	require.Empty(t, e.speculationPoint(200, 300, 1000), "this pause was tried")
	require.Equal(t, "go forward", e.speculationPoint(200, 250, 2000), "a new pause")
}

// TestEarLock: the lock serializes audio calls, a waiter gives up on its ctx, and a closed ear
// refuses them.
func TestEarLock(t *testing.T) {
	asr := &recASR{}
	e, v := newTestEar(asr, 100)
	require.NoError(t, e.lock(context.Background()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, e.lock(ctx), context.Canceled)
	e.unlock()
	e.hold()
	e.close()
	e.close() // idempotent
	e.unlock()
	require.True(t, asr.closed)
	require.True(t, v.closed)
	require.ErrorIs(t, e.lock(context.Background()), ErrClosed)
}
