package session

import (
	"context"
	"errors"
	"fmt"
	"github.com/omniserve/omniserve/internal/duplex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/requestclient"
)

// TestSemStateDecide checks semState.decide's end-of-turn rule on its own: the estimate against
// the threshold, silence alone without an estimate, and the maximum wait in audio or in time.
func TestSemStateDecide(t *testing.T) {
	rule := SemanticParams("medium") // threshold 0.2, max wait 4000 ms
	t0 := time.Unix(1000, 0)
	cases := []struct {
		name     string
		p        semPause
		inputMs  float64
		now      time.Time
		reason   string // "" = the turn goes on
		silence  int
		withProb bool
	}{
		{name: "scored above threshold", p: semPause{endMs: 1000, scored: true, prob: 0.5}, inputMs: 1300, reason: endOfTurnSemantic, silence: 300, withProb: true},
		{name: "scored below threshold waits", p: semPause{endMs: 1000, scored: true, prob: 0.1}, inputMs: 1300},
		{name: "scored below threshold at max wait", p: semPause{endMs: 1000, scored: true, prob: 0.1}, inputMs: 5000, reason: endOfTurnMaxWait, silence: 4000, withProb: true},
		{name: "no estimate before its silence", p: semPause{endMs: 1000, fallback: true}, inputMs: 1000 + float64(SemanticSilenceMs("medium")) - 1},
		{name: "no estimate after its silence", p: semPause{endMs: 1000, fallback: true}, inputMs: 1000 + float64(SemanticSilenceMs("medium")), reason: endOfTurnSilence, silence: SemanticSilenceMs("medium")},
		{name: "unscored waits", p: semPause{endMs: 1000}, inputMs: 2000},
		{name: "timed out in time", p: semPause{endMs: 1000, timedOut: true, startedAt: t0, startSilenceMs: 500}, inputMs: 1500, now: t0.Add(3500 * time.Millisecond), reason: endOfTurnMaxWait, silence: 4000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := &semState{}
			p := tc.p
			m.pause = &p
			info := m.decide(&p, rule, "medium", tc.inputMs, tc.now)
			if tc.reason == "" {
				require.Nil(t, info)
				require.Same(t, &p, m.pause, "an undecided pause stays")
				return
			}
			require.NotNil(t, info)
			require.Equal(t, tc.reason, info.Reason)
			require.Equal(t, tc.silence, info.SilenceMs)
			require.Equal(t, tc.withProb, info.Probability != nil)
			require.Nil(t, m.pause, "a decided pause is dropped")
		})
	}
}

// TestSemStateAnswer checks how an estimate reaches its pause: its own pause is scored, a
// failed estimate falls back to silence (told once per reason), a stale one lets the current
// pause ask.
func TestSemStateAnswer(t *testing.T) {
	cases := []struct {
		name      string
		seq       int
		asked     bool
		prior     string // semState.noEstimate before
		a         eotAnswer
		wantPause bool
		reask     bool
		why       string
		scored    bool
	}{
		{name: "own answer scores", seq: 2, asked: true, prior: "x", a: eotAnswer{seq: 2, e: requestclient.EndOfTurn{Prob: 0.7, Text: "hi"}}, wantPause: true, scored: true},
		{name: "own error falls back", seq: 2, asked: true, a: eotAnswer{seq: 2, err: errors.New("boom")}, wantPause: true, why: "boom"},
		{name: "same error told once", seq: 2, asked: true, prior: "boom", a: eotAnswer{seq: 2, err: errors.New("boom")}, wantPause: true},
		{name: "stale answer, pause not asked", seq: 3, a: eotAnswer{seq: 2}, reask: true},
		{name: "stale answer, pause asked", seq: 3, asked: true, a: eotAnswer{seq: 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := &semState{asking: true, noEstimate: tc.prior}
			m.pause = &semPause{seq: tc.seq, asked: tc.asked}
			p, reask, why := m.answer(tc.a)
			require.False(t, m.asking)
			require.Equal(t, tc.wantPause, p != nil)
			require.Equal(t, tc.reask, reask)
			require.Equal(t, tc.why, why)
			if p != nil {
				require.Equal(t, tc.scored, p.scored)
				require.Equal(t, !tc.scored, p.fallback)
			}
		})
	}
	m := &semState{asking: true}
	p, reask, why := m.answer(eotAnswer{seq: 1})
	require.Nil(t, p)
	require.False(t, reask)
	require.Empty(t, why)
}

// TestSemStateBeginDrop checks that a pause starts its timer at the maximum wait less the
// silence already heard, and that drop forgets it (once).
func TestSemStateBeginDrop(t *testing.T) {
	m := &semState{}
	require.Nil(t, m.timerC())
	m.begin(1000, 1200, SemanticParams("high"), time.Unix(5, 0))
	require.NotNil(t, m.pause)
	require.Equal(t, 1, m.pause.seq)
	require.Equal(t, 200.0, m.pause.startSilenceMs)
	require.NotNil(t, m.timerC())
	m.begin(2000, 1500, SemanticParams("high"), time.Unix(6, 0)) // audio behind the stamp: no negative silence
	require.Equal(t, 2, m.pause.seq)
	require.Equal(t, 0.0, m.pause.startSilenceMs)
	require.True(t, m.drop())
	require.False(t, m.drop())
	m.stopTimer()
}

// TestSemStateAskWithout checks the cases where no estimate is asked for.
func TestSemStateAskWithout(t *testing.T) {
	m := &semState{}
	p := &semPause{seq: 1}
	require.Equal(t, "the engine gives no end-of-turn estimate", m.ask(t.Context(), p, nil, true, time.Second))
	require.True(t, p.asked)
	require.True(t, p.fallback)
	require.Empty(t, m.ask(t.Context(), &semPause{seq: 2}, nil, true, time.Second), "the same reason is told once")
	m.asking = true
	p3 := &semPause{seq: 3}
	require.Empty(t, m.ask(t.Context(), p3, nil, false, time.Second))
	require.False(t, p3.asked, "an estimate in flight: this pause asks when it arrives")
}

// eotEngine is an engine that estimates the end of a turn (prob, or err) and keeps the turn
// statistics' input ends; nothing else of it is called.
type eotEngine struct {
	Engine
	prob      float64
	err       error
	inputEnds []int
}

func (e *eotEngine) EndOfTurnProb(context.Context) (requestclient.EndOfTurn, error) {
	return requestclient.EndOfTurn{Prob: e.prob, Text: "is that all"}, e.err
}
func (e *eotEngine) MarkInputEnd(turn int, _ float64) { e.inputEnds = append(e.inputEnds, turn) }
func (e *eotEngine) ClearTurnInput(int)               {}
func (e *eotEngine) ObserveBargeIn(float64)           {}

// eotCounts keeps the end-of-turn decisions observed, as "reason/scored".
type eotCounts struct{ decisions []string }

func (c *eotCounts) ObserveEndOfTurn(reason string, _ float64, scored bool) {
	c.decisions = append(c.decisions, fmt.Sprintf("%s/%t", reason, scored))
}

// nextAnswer is the next estimate to arrive (the test fails when none comes).
func nextAnswer(t *testing.T, m *semState) eotAnswer {
	t.Helper()
	select {
	case a := <-m.results:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no end-of-turn estimate arrived")
		return eotAnswer{}
	}
}

// TestSemStateActions checks what semState does with a pause on the actor, without a Session:
// it asks the engine, decides, closes the speech segment with speech_stopped (and its
// end_of_turn), marks the turn's input end, counts the decision and reports that the turn
// ended; a pause the client's own commit or clear ends closes the segment without a decision;
// nothing happens while semantic_vad's pauses are not in force.
func TestSemStateActions(t *testing.T) {
	td := &TurnDetection{TurnDetection: duplex.TurnDetection{Type: "semantic_vad", Eagerness: "medium"}} // threshold 0.2, max wait 4000 ms
	silence := float64(SemanticSilenceMs("medium"))
	cases := []struct {
		name      string
		engine    *eotEngine // nil: the engine gives no estimate
		off       bool       // semantic_vad's pauses not in force
		run       func(ctx context.Context, m *semState, at semMoment) bool
		ended     bool
		stops     []string // speech_stopped events: their end_of_turn reason ("-" for none)
		decisions []string
	}{
		{name: "high estimate ends the turn", engine: &eotEngine{prob: 0.7},
			run: func(ctx context.Context, m *semState, at semMoment) bool {
				require.False(t, m.end(ctx, at), "waits for the estimate")
				return m.answered(ctx, nextAnswer(t, m), at)
			}, ended: true, stops: []string{endOfTurnSemantic}, decisions: []string{"semantic/true"}},
		{name: "low estimate waits for the maximum wait", engine: &eotEngine{prob: 0.1},
			run: func(ctx context.Context, m *semState, at semMoment) bool {
				require.False(t, m.end(ctx, at))
				require.False(t, m.answered(ctx, nextAnswer(t, m), at), "below the threshold the turn goes on")
				at.in.inputMs = 1000 + 4000
				return m.end(ctx, at)
			}, ended: true, stops: []string{endOfTurnMaxWait}, decisions: []string{"max_wait/true"}},
		{name: "a stale estimate lets the new pause ask", engine: &eotEngine{prob: 0.7},
			run: func(ctx context.Context, m *semState, at semMoment) bool {
				require.False(t, m.end(ctx, at), "the first pause asks")
				m.drop() // the user spoke again; a new pause begins
				at.in.inputMs = 1600
				m.begin(1500, at.in.inputMs, SemanticParams(td.Eagerness), time.Now())
				require.False(t, m.end(ctx, at), "one estimate at a time: the new pause waits")
				require.False(t, m.answered(ctx, nextAnswer(t, m), at), "the first pause's answer is stale")
				return m.answered(ctx, nextAnswer(t, m), at)
			}, ended: true, stops: []string{endOfTurnSemantic}, decisions: []string{"semantic/true"}},
		{name: "failed estimate: silence alone", engine: &eotEngine{err: errors.New("no thinker")},
			run: func(ctx context.Context, m *semState, at semMoment) bool {
				require.False(t, m.end(ctx, at))
				require.False(t, m.answered(ctx, nextAnswer(t, m), at))
				at.in.inputMs = 1000 + silence
				return m.end(ctx, at)
			}, ended: true, stops: []string{endOfTurnSilence}, decisions: []string{"silence/false"}},
		{name: "no estimator: silence alone", run: func(ctx context.Context, m *semState, at semMoment) bool {
			require.False(t, m.end(ctx, at))
			at.in.inputMs = 1000 + silence
			return m.end(ctx, at)
		}, ended: true, stops: []string{endOfTurnSilence}, decisions: []string{"silence/false"}},
		{name: "the timer ends it in time", engine: &eotEngine{prob: 0.1},
			run:   func(_ context.Context, m *semState, at semMoment) bool { return m.timedOut(at) },
			ended: true, stops: []string{endOfTurnMaxWait}, decisions: []string{"max_wait/false"}},
		{name: "the client's commit abandons it", engine: &eotEngine{prob: 0.9},
			run: func(ctx context.Context, m *semState, at semMoment) bool {
				m.abandon(at.in)
				m.abandon(at.in) // once
				return m.end(ctx, at) || m.timedOut(at)
			}, stops: []string{"-"}},
		{name: "not in force: nothing", engine: &eotEngine{prob: 0.9}, off: true,
			run: func(ctx context.Context, m *semState, at semMoment) bool {
				m.asking = true
				ended := m.end(ctx, at) || m.timedOut(at) || m.answered(ctx, eotAnswer{seq: 1}, at)
				require.False(t, m.asking, "an answer while off frees the estimate")
				return ended
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stops []string
			counts := &eotCounts{}
			m := &semState{log: zap.NewNop(), observer: counts, wall: func() float64 { return 1 },
				send: func(e Effect) {
					s, ok := e.(InputSpeech)
					require.True(t, ok, "%T", e)
					require.Equal(t, "item_1", s.ItemID)
					if s.EndOfTurn == nil {
						stops = append(stops, "-")
						return
					}
					stops = append(stops, s.EndOfTurn.Reason)
				}}
			defer m.stopTimer()
			defer m.wg.Wait()
			in := &inputAudio{inputMs: 1200, inSpeech: true, speechItemID: "item_1"}
			at := semMoment{in: in, td: td, turn: 3}
			if tc.off {
				at.td = nil
			}
			if tc.engine != nil {
				at.engine = tc.engine
			}
			m.begin(1000, in.inputMs, SemanticParams(td.Eagerness), time.Now())
			require.Equal(t, tc.ended, tc.run(t.Context(), m, at))
			require.Equal(t, tc.stops, stops)
			require.Equal(t, tc.decisions, counts.decisions)
			require.Equal(t, len(tc.stops) == 0, in.inSpeech, "speech_stopped closes the segment")
			if tc.ended {
				require.Nil(t, m.pause, "a decided pause is dropped")
				if tc.engine != nil {
					require.Equal(t, []int{3}, tc.engine.inputEnds, "the turn's input ends at the decision")
				}
			}
		})
	}
}

// TestSemStateEngineEnded checks the engine's own end-of-turn decision (auto-response): it
// closes an open segment with speech_stopped and its end_of_turn, and is counted either way.
func TestSemStateEngineEnded(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inSpeech bool
		stops    int
	}{{"open segment closed", true, 1}, {"no open segment", false, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			var sent []InputSpeech
			counts := &eotCounts{}
			m := &semState{log: zap.NewNop(), observer: counts,
				send: func(e Effect) { sent = append(sent, e.(InputSpeech)) }}
			in := &inputAudio{inputMs: 2500, inSpeech: tc.inSpeech, speechItemID: "item_1"}
			m.engineEnded(&duplex.EndOfTurnDecision{Reason: endOfTurnSemantic, Prob: 0.8, Scored: true, SilenceMs: 600}, in)
			require.Len(t, sent, tc.stops)
			if tc.stops > 0 {
				require.Equal(t, 2500, sent[0].AudioMs)
				require.Equal(t, endOfTurnSemantic, sent[0].EndOfTurn.Reason)
				require.Equal(t, 600, sent[0].EndOfTurn.SilenceMs)
				require.InDelta(t, 0.8, *sent[0].EndOfTurn.Probability, 0)
			}
			require.False(t, in.inSpeech)
			require.Equal(t, []string{"semantic/true"}, counts.decisions)
		})
	}
}
