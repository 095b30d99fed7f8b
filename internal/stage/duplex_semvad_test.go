package stage

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
)

// scriptedScorer stands in for the thinker's end-of-turn estimate: it answers prob and records
// the partial transcripts it was asked about.
type scriptedScorer struct {
	mu    sync.Mutex
	prob  float64
	asked []string
}

func (s *scriptedScorer) score(text string) (EndOfTurn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, text)
	return EndOfTurn{Prob: s.prob, Text: text}, nil
}

func (s *scriptedScorer) texts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.asked...)
}

// openSemantic opens an auto-response semantic_vad stream; a non-nil scorer replaces the
// thinker's estimate.
func openSemantic(t *testing.T, source, eagerness string, sc *scriptedScorer) (*DuplexStream, *recSink) {
	t.Helper()
	p, _ := newTestPipeline(t, func(c *PipelineConfig) { c.Thinker.EndOfTurn = source })
	sink := newRecSink(t)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{AutoResponse: true, MaxTokens: 4, Turn: duplex.TurnDetection{Type: duplex.TurnSemanticVAD, Eagerness: eagerness}}, RequestID: "duplex-semvad", PreemptiveMs: -1}, sink)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	if sc != nil {
		d.conv.scoreEOT = sc.score
	}
	return d, sink
}

// speakDecisions returns the stream's speak decisions so far.
func speakDecisions(s *recSink) []OutputMessage {
	outs, _, _ := s.snapshot()
	var speak []OutputMessage
	for _, o := range outs {
		if o.Kind == duplex.OutDecision && o.Decision == duplex.DecisionSpeak {
			speak = append(speak, o)
		}
	}
	return speak
}

// silenceUntilSpeak appends 100 ms units of silence (pausing between them, so the estimate's
// answer can arrive as it would in real time) until the stream speaks or upToMs is fed; it
// returns the speak decisions.
func silenceUntilSpeak(t *testing.T, d *DuplexStream, sink *recSink, upToMs int) []OutputMessage {
	t.Helper()
	return silenceUntilSpeakPaced(t, d, sink, upToMs, 10*time.Millisecond)
}

// silenceUntilSpeakPaced is silenceUntilSpeak with each 100 ms unit of silence followed by
// pace of wall time: at real time (100 ms) a real engine's estimate has the wall time a
// client streaming in real time would give it, on a loaded machine too.
func silenceUntilSpeakPaced(t *testing.T, d *DuplexStream, sink *recSink, upToMs int, pace time.Duration) []OutputMessage {
	t.Helper()
	unit := make([]float32, unitSamples)
	for fed := 0; fed < upToMs; fed += 100 {
		require.NoError(t, d.AppendAudio(context.Background(), 0, unit))
		if s := speakDecisions(sink); len(s) > 0 {
			return s
		}
		time.Sleep(pace)
	}
	return speakDecisions(sink)
}

// TestDuplexSemanticVADEndsOnEstimate: an estimate at or above the eagerness's threshold ends
// the turn at the first pause, long before the maximum wait, and the speak decision says so.
// The scorer was asked about the partial transcript of the open utterance.
func TestDuplexSemanticVADEndsOnEstimate(t *testing.T) {
	sc := &scriptedScorer{prob: 0.9}
	d, sink := openSemantic(t, endOfTurnThinker, "medium", sc)
	feedUnits(t, d, goForward(t))
	speak := silenceUntilSpeak(t, d, sink, 6000)
	require.Len(t, speak, 1)
	eot := speak[0].EndOfTurn
	require.NotNil(t, eot)
	require.Equal(t, duplex.EndOfTurnSemantic, eot.Reason)
	require.True(t, eot.Scored)
	require.InDelta(t, 0.9, eot.Prob, 1e-9)
	require.GreaterOrEqual(t, eot.SilenceMs, duplex.SemanticParams("medium").MinSilenceMs)
	require.Less(t, eot.SilenceMs, duplex.SemanticParams("medium").MaxWaitMs)
	asked := sc.texts()
	require.NotEmpty(t, asked)
	require.GreaterOrEqual(t, wordOverlap(asked[0], "go forward ten meters"), 0.75, "asked about %q", asked[0])
}

// TestDuplexSemanticVADWaitsForMaxWait: a low estimate keeps listening; the turn ends when the
// pause reaches the maximum wait, counted in input audio.
func TestDuplexSemanticVADWaitsForMaxWait(t *testing.T) {
	sc := &scriptedScorer{prob: 0.01}
	d, sink := openSemantic(t, endOfTurnThinker, "high", sc)
	feedUnits(t, d, goForward(t))
	speak := silenceUntilSpeak(t, d, sink, 4000)
	require.Len(t, speak, 1)
	eot := speak[0].EndOfTurn
	require.NotNil(t, eot)
	require.Equal(t, duplex.EndOfTurnMaxWait, eot.Reason)
	require.True(t, eot.Scored)
	require.InDelta(t, 0.01, eot.Prob, 1e-9)
	require.GreaterOrEqual(t, eot.SilenceMs, duplex.SemanticParams("high").MaxWaitMs)
	require.Less(t, eot.SilenceMs, duplex.SemanticParams("high").MaxWaitMs+200, "decided in the unit that reached it")
	require.Len(t, sc.texts(), 1, "one estimate per pause")
}

// TestDuplexSemanticVADSpeechResumes: speech in an undecided pause continues the same turn:
// one speak decision, one transcript with both utterances, and a fresh estimate for the
// second pause on the longer partial.
func TestDuplexSemanticVADSpeechResumes(t *testing.T) {
	sc := &scriptedScorer{prob: 0.01}
	d, sink := openSemantic(t, endOfTurnThinker, "medium", sc)
	speech := goForward(t)
	feedUnits(t, d, speech)
	require.Empty(t, silenceUntilSpeak(t, d, sink, 1000), "a low estimate waits")
	require.Len(t, sc.texts(), 1)
	feedUnits(t, d, speech)
	speak := silenceUntilSpeak(t, d, sink, 6000)
	require.Len(t, speak, 1, "one turn")
	require.Equal(t, duplex.EndOfTurnMaxWait, speak[0].EndOfTurn.Reason)
	asked := sc.texts()
	require.Len(t, asked, 2)
	require.Greater(t, len(asked[1]), len(asked[0]), "the second pause's partial holds both utterances: %q", asked)
	outs, _, _ := sink.snapshot()
	var transcripts []string
	for _, o := range outs {
		if o.Kind == duplex.OutTranscript {
			transcripts = append(transcripts, o.Text)
		}
	}
	require.Len(t, transcripts, 1)
	require.Equal(t, asked[1], transcripts[0])
}

// TestDuplexSemanticVADSilenceWindows: without an estimate (end_of_turn off; auto on a dummy
// model) the thinker is never asked and the eagerness's silence window ends the turn.
func TestDuplexSemanticVADSilenceWindows(t *testing.T) {
	for _, source := range []string{endOfTurnOff, endOfTurnAuto} {
		t.Run(source, func(t *testing.T) {
			sc := &scriptedScorer{prob: 0.9}
			d, sink := openSemantic(t, source, "low", sc)
			feedUnits(t, d, goForward(t))
			speak := silenceUntilSpeak(t, d, sink, 4000)
			require.Len(t, speak, 1)
			eot := speak[0].EndOfTurn
			require.NotNil(t, eot)
			require.Equal(t, duplex.EndOfTurnSilence, eot.Reason)
			require.False(t, eot.Scored)
			rule := duplex.SemanticParams("low")
			require.GreaterOrEqual(t, eot.SilenceMs, rule.SilenceMs)
			require.Less(t, eot.SilenceMs, rule.SilenceMs+200)
			require.Empty(t, sc.texts(), "the thinker is not asked")
		})
	}
}

// TestDuplexSemanticVADThinker: on the real dummy engine with end_of_turn: thinker the pause is
// scored by the thinker itself (its probability means nothing on random weights, so the reason
// may be either), and the turn is answered.
func TestDuplexSemanticVADThinker(t *testing.T) {
	d, sink := openSemantic(t, endOfTurnThinker, "high", nil)
	feedUnits(t, d, goForward(t))
	// At real time: fed ten times faster, the maximum wait (counted in audio) could pass before
	// the thinker's estimate on a loaded machine, and the pause would end unscored.
	speak := silenceUntilSpeakPaced(t, d, sink, 4000, 100*time.Millisecond)
	require.Len(t, speak, 1)
	eot := speak[0].EndOfTurn
	require.NotNil(t, eot)
	require.True(t, eot.Scored)
	require.Contains(t, []string{duplex.EndOfTurnSemantic, duplex.EndOfTurnMaxWait}, eot.Reason)
	require.GreaterOrEqual(t, eot.Prob, 0.0)
	require.LessOrEqual(t, eot.Prob, 1.0)
	t.Logf("dummy thinker: p=%.3g, %s after %d ms", eot.Prob, eot.Reason, eot.SilenceMs)
	sink.waitTurnEnd(t, speak[0].Turn, 30*time.Second)
}
