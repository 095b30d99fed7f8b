package session

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
