package session

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/requestclient"
	"github.com/omniserve/omniserve/internal/testenv"
)

// scoringEngine is a fakeEngine whose thinker estimates the end of a turn from a script: the
// n-th estimate returns probs[n] (the last one repeats). It checks its input: an estimate
// comes after the speech it judges reached the engine (the appends before it), never before
// the first one.
type scoringEngine struct {
	*fakeEngine
	probs []float64
	asked int
}

// DiscardAudio implements AudioDiscarder, so that the session streams its buffer into the
// engine ahead of the commit (the ASR hears the words the estimate is made on).
func (e *scoringEngine) DiscardAudio(context.Context) error {
	e.rec("discard")
	return nil
}

func (e *scoringEngine) EndOfTurnProb(context.Context) (requestclient.EndOfTurn, error) {
	calls := e.list()
	assert.Contains(e.t, calls, "append", "an estimate before any audio reached the engine")
	e.mu.Lock()
	p := e.probs[min(e.asked, len(e.probs)-1)]
	e.asked++
	e.mu.Unlock()
	e.rec(fmt.Sprintf("eot:%.2f", p))
	return requestclient.EndOfTurn{Prob: p, Text: "go forward ten meters"}, nil
}

// semanticRun streams goforward.raw and then silence in 100 ms appends (each answered before the
// next, as a real-time client's are far apart) under semantic_vad with eagerness, until the
// turn ends or maxSilenceMs of silence went by. It returns the speech_stopped event (nil when
// none came) and the engine's calls.
func semanticRun(t *testing.T, eng Engine, fake *fakeEngine, eagerness string, maxSilenceMs int, resumeAtMs int) (*InputSpeech, []string) {
	t.Helper()
	raw := testenv.ReadFile(t, "/usr/share/pocketsphinx/test/data/goforward.raw", "pocketsphinx-testdata")
	m := NewManager(ManagerConfig{MaxSessions: 1, MaxOutputLead: time.Minute}, &engineBackend{eng: eng, fake: fake}, zap.NewNop())
	sk := &sink{ch: make(chan Event, 4096)}
	s, wait := runSession(t, m, Options{Duplex: true}, sk, ConfigPatch{
		TurnDetectionSet: true, TurnDetection: turnPatch(tdType("semantic_vad"), tdEagerness(eagerness), tdCreateResponse(false)),
		InputFormat: &AudioFormat{Type: "pcm16", Rate: 16000}})
	ctx := context.Background()
	var stopped *InputSpeech
	committed := false
	feed := func(b []byte) {
		for i := 0; i < len(b); i += 3200 {
			require.NoError(t, s.Submit(ctx, &AppendAudio{Data: b[i:min(i+3200, len(b))]}))
		}
	}
	feed(raw)
	silence := make([]byte, 3200)
	deadline := time.Now().Add(20 * time.Second)
	for ms := 0; ms < maxSilenceMs && stopped == nil; ms += 100 {
		if resumeAtMs > 0 && ms == resumeAtMs {
			feed(raw) // the user goes on: the same turn
		}
		require.NoError(t, s.Submit(ctx, &AppendAudio{Data: silence}))
		require.NoError(t, s.Submit(ctx, &Heartbeat{}))
	collect:
		for time.Now().Before(deadline) {
			select {
			case ev := <-sk.ch:
				if ev.typ() == "input_audio_buffer.speech_stopped" {
					st := effectOf[InputSpeech](t, ev)
					stopped = &st
				}
				if ev.typ() == "input_audio_buffer.committed" {
					require.NotNil(t, stopped, "speech_stopped comes before the commit")
					committed = true
				}
				if ev.typ() == "session.heartbeat_ack" {
					break collect
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no session.heartbeat_ack")
			}
		}
		if stopped == nil {
			// The estimate is answered on a goroutine of its own: let it land before the next
			// 100 ms of input, as it would in real time.
			time.Sleep(5 * time.Millisecond)
		}
	}
	if stopped != nil && !committed {
		sk.until(t, "input_audio_buffer.committed")
	}
	require.NoError(t, s.Submit(ctx, &Heartbeat{}))
	s.Stop(ReasonClientClose)
	wait()
	return stopped, fake.list()
}

func countCalls(calls []string, prefix string) int {
	n := 0
	for _, c := range calls {
		if len(c) >= len(prefix) && c[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

// TestSemanticVADThresholds: for each eagerness, an estimate at its threshold ends the turn in
// the pause (reason semantic, the probability reported, the silence no longer than the
// maximum wait), and one just below it waits until the maximum wait (reason max_wait, the pause
// at least that long and at most one append longer). The scorer is asked once per pause, after
// the speech reached the engine.
func TestSemanticVADThresholds(t *testing.T) {
	for _, eagerness := range []string{"low", "medium", "high", "auto"} {
		rule := SemanticParams(eagerness)
		for _, tc := range []struct {
			name   string
			prob   float64
			reason string
		}{
			{"at threshold", rule.Threshold, endOfTurnSemantic},
			{"below threshold", rule.Threshold - 0.01, endOfTurnMaxWait},
		} {
			t.Run(eagerness+"/"+tc.name, func(t *testing.T) {
				fake := &fakeEngine{t: t}
				eng := &scoringEngine{fakeEngine: fake, probs: []float64{tc.prob}}
				st, calls := semanticRun(t, eng, fake, eagerness, rule.MaxWaitMs+1000, 0)
				require.NotNil(t, st, "the turn ended")
				require.NotNil(t, st.EndOfTurn)
				require.Equal(t, tc.reason, st.EndOfTurn.Reason)
				require.Equal(t, 1, countCalls(calls, "eot:"), "one estimate per pause: %v", calls)
				require.NotNil(t, st.EndOfTurn.Probability)
				require.Equal(t, tc.prob, *st.EndOfTurn.Probability)
				if tc.reason == endOfTurnSemantic {
					require.GreaterOrEqual(t, st.EndOfTurn.SilenceMs, rule.MinSilenceMs)
					require.Less(t, st.EndOfTurn.SilenceMs, rule.MaxWaitMs)
				} else {
					require.GreaterOrEqual(t, st.EndOfTurn.SilenceMs, rule.MaxWaitMs)
					require.Less(t, st.EndOfTurn.SilenceMs, rule.MaxWaitMs+100)
				}
				require.Equal(t, 1, countCalls(calls, "commit"), "the turn was committed once: %v", calls)
			})
		}
	}
}

// TestSemanticVADParams: eagerness maps to its threshold and waits; auto is medium (OpenAI),
// and a lower eagerness asks for more certainty and waits longer.
func TestSemanticVADParams(t *testing.T) {
	require.Equal(t, SemanticParams("medium"), SemanticParams("auto"))
	require.Equal(t, 8000, SemanticParams("low").MaxWaitMs)
	require.Equal(t, 4000, SemanticParams("medium").MaxWaitMs)
	require.Equal(t, 2000, SemanticParams("high").MaxWaitMs)
	low, med, high := SemanticParams("low"), SemanticParams("medium"), SemanticParams("high")
	require.Greater(t, low.Threshold, med.Threshold)
	require.Greater(t, med.Threshold, high.Threshold)
	require.Greater(t, low.MinSilenceMs, med.MinSilenceMs)
	require.Greater(t, med.MinSilenceMs, high.MinSilenceMs)
}

// TestSemanticVADResume: a low estimate keeps the turn open, and speech in the pause continues
// the same turn: no speech_stopped and no commit for the first pause, a second estimate for the
// second pause, whose high probability ends the turn.
func TestSemanticVADResume(t *testing.T) {
	fake := &fakeEngine{t: t}
	eng := &scoringEngine{fakeEngine: fake, probs: []float64{0.01, 0.9}}
	st, calls := semanticRun(t, eng, fake, "medium", 6000, 1000)
	require.NotNil(t, st)
	require.Equal(t, endOfTurnSemantic, st.EndOfTurn.Reason)
	require.Equal(t, 0.9, *st.EndOfTurn.Probability)
	require.Equal(t, []string{"eot:0.01", "eot:0.90"}, filterCalls(calls, "eot:"))
	require.Equal(t, 1, countCalls(calls, "commit"), "%v", calls)
}

func filterCalls(calls []string, prefix string) []string {
	var out []string
	for _, c := range calls {
		if len(c) >= len(prefix) && c[:len(prefix)] == prefix {
			out = append(out, c)
		}
	}
	return out
}

// TestSemanticVADWithoutEstimate: an engine without estimates ends the turn on silence alone,
// after the eagerness's silence window (reason silence, no probability).
func TestSemanticVADWithoutEstimate(t *testing.T) {
	fake := &fakeEngine{t: t}
	st, _ := semanticRun(t, fake, fake, "high", 3000, 0)
	require.NotNil(t, st)
	require.Equal(t, endOfTurnSilence, st.EndOfTurn.Reason)
	require.Nil(t, st.EndOfTurn.Probability)
	require.GreaterOrEqual(t, st.EndOfTurn.SilenceMs, SemanticSilenceMs("high"))
	require.Less(t, st.EndOfTurn.SilenceMs, SemanticSilenceMs("high")+100)
}

// TestSemanticVADBadEagerness: a bad eagerness in session.update is an invalid_value error
// naming the parameter.
func TestSemanticVADBadEagerness(t *testing.T) {
	s, sk, _, wait := startSession(t, &fakeEngine{t: t}, time.Minute)
	require.NoError(t, s.Submit(context.Background(), &UpdateSession{Patch: ConfigPatch{TurnDetectionSet: true,
		TurnDetection: turnPatch(tdType("semantic_vad"), tdEagerness("eager"))}}))
	ev := effectOf[Error](t, sk.until(t, "error"))
	require.Equal(t, "invalid_value", ev.Code)
	require.Equal(t, "session.audio.input.turn_detection.eagerness", ev.Param)
	s.Stop(ReasonClientClose)
	wait()
}

// TestSemanticVADOneAppend: a client that sends speech and more than the maximum wait of silence
// in one append gets the turn ended at once (max_wait), and the thinker is not asked about a
// pause that is already over.
func TestSemanticVADOneAppend(t *testing.T) {
	raw := testenv.ReadFile(t, "/usr/share/pocketsphinx/test/data/goforward.raw", "pocketsphinx-testdata")
	fake := &fakeEngine{t: t}
	eng := &scoringEngine{fakeEngine: fake, probs: []float64{0.9}}
	m := NewManager(ManagerConfig{MaxSessions: 1, MaxOutputLead: time.Minute}, &engineBackend{eng: eng, fake: fake}, zap.NewNop())
	sk := &sink{ch: make(chan Event, 4096)}
	s, wait := runSession(t, m, Options{Duplex: true}, sk, ConfigPatch{
		TurnDetectionSet: true, TurnDetection: turnPatch(tdType("semantic_vad"), tdEagerness("high"), tdCreateResponse(false)),
		InputFormat: &AudioFormat{Type: "pcm16", Rate: 16000}})
	require.NoError(t, s.Submit(context.Background(), &AppendAudio{Data: append(append([]byte(nil), raw...), make([]byte, 2*16000*3)...)}))
	st := effectOf[InputSpeech](t, sk.until(t, "input_audio_buffer.speech_stopped"))
	require.Equal(t, endOfTurnMaxWait, st.EndOfTurn.Reason)
	require.Nil(t, st.EndOfTurn.Probability)
	sk.until(t, "input_audio_buffer.committed")
	s.Stop(ReasonClientClose)
	wait()
	require.Zero(t, countCalls(fake.list(), "eot:"))
}

// TestSemanticVADMaxWaitInTime: a client that sends its speech and half a second of silence and
// then stops sending (as the Agents SDK quick-start does) still gets its turn ended at the
// maximum wait, counted in time when no audio says it: max_wait after about 2 s (high).
func TestSemanticVADMaxWaitInTime(t *testing.T) {
	raw := testenv.ReadFile(t, "/usr/share/pocketsphinx/test/data/goforward.raw", "pocketsphinx-testdata")
	fake := &fakeEngine{t: t}
	eng := &scoringEngine{fakeEngine: fake, probs: []float64{0.001}}
	m := NewManager(ManagerConfig{MaxSessions: 1, MaxOutputLead: time.Minute}, &engineBackend{eng: eng, fake: fake}, zap.NewNop())
	sk := &sink{ch: make(chan Event, 4096)}
	s, wait := runSession(t, m, Options{Duplex: true}, sk, ConfigPatch{
		TurnDetectionSet: true, TurnDetection: turnPatch(tdType("semantic_vad"), tdEagerness("high"), tdCreateResponse(false)),
		InputFormat: &AudioFormat{Type: "pcm16", Rate: 16000}})
	b := append(append([]byte(nil), raw...), make([]byte, 2*16000/2)...)
	start := time.Now()
	for i := 0; i < len(b); i += 3200 {
		require.NoError(t, s.Submit(context.Background(), &AppendAudio{Data: b[i:min(i+3200, len(b))]}))
	}
	st := effectOf[InputSpeech](t, sk.until(t, "input_audio_buffer.speech_stopped"))
	took := time.Since(start)
	require.Equal(t, endOfTurnMaxWait, st.EndOfTurn.Reason)
	require.Equal(t, 0.001, *st.EndOfTurn.Probability)
	require.GreaterOrEqual(t, st.EndOfTurn.SilenceMs, 2000, "the pause is reported as long as it lasted")
	require.GreaterOrEqual(t, took, 1500*time.Millisecond, "the wait ran in time: %v", took)
	sk.until(t, "input_audio_buffer.committed")
	s.Stop(ReasonClientClose)
	wait()
}
