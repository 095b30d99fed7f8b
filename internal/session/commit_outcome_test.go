package session

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A commit without audio of its own ends the turn: in the response that runs, in the one the
// engine is about to give to the utterance its VAD ended (the listen owed until that turn is
// over), or in a listen now.
func TestEmptyCommitOutcome(t *testing.T) {
	tests := []struct {
		name      string
		active    bool
		heardTurn int
		lastClose int
		listenNow bool
		owed      bool
	}{
		{"nothing heard, no response: listen now", false, -1, -1, true, false},
		{"a response runs: it is the outcome", true, 3, 2, false, false},
		{"the engine's turn is not over: the listen is owed", false, 3, 2, false, true},
		{"the engine's turn is over: listen now", false, 3, 3, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := newResponses("s", 0)
			rs.heardTurn, rs.lastClosed = tc.heardTurn, tc.lastClose
			if tc.active {
				rs.resp = &response{id: "r"}
			}
			conv := &conversation{}
			it, evs, listen := emptyCommit(conv, &rs, &inputAudio{}, 0, 0, ReasonNoOutput)
			require.Equal(t, tc.listenNow, listen)
			require.Equal(t, tc.owed, rs.owedListen != "")
			require.NotNil(t, conv.find(it.ID), "the empty user item joins the conversation")
			c, ok := evs[0].Effect.(InputCommitted)
			require.True(t, ok)
			require.True(t, c.Empty)
			require.Equal(t, tc.listenNow, c.NoResponse)
		})
	}
}

// An owed listen is told once the engine's turn is over without a response, and dropped when a
// response begins.
func TestSettleListen(t *testing.T) {
	rs := newResponses("s", 0)
	require.Empty(t, rs.settleListen(), "none owed")
	rs.heard(4)
	rs.owedListen = ReasonNoOutput
	require.Empty(t, rs.settleListen(), "the turn is not over")
	rs.closeTurn(4)
	require.Equal(t, ReasonNoOutput, rs.settleListen())
	require.Empty(t, rs.settleListen(), "told once")

	rs.heard(5)
	rs.owedListen = ReasonNoOutput
	rs.resp = &response{id: "r"}
	require.Empty(t, rs.settleListen(), "the response is the outcome")
	rs.resp = nil
	rs.closeTurn(5)
	require.Empty(t, rs.settleListen())
}

// An utterance announced (speech_started) whose transcript has not come: the engine ended it and
// will answer or listen to it, so the listen is owed until its transcript and its turn are
// over; the empty item does not take the utterance's id, which its transcript's item will.
func TestEmptyCommitAwaitsTheTranscript(t *testing.T) {
	rs := newResponses("s", 0)
	in := &inputAudio{speechItemID: "item_speech"}
	conv := &conversation{}
	it, _, listen := emptyCommit(conv, &rs, in, 0, 0, ReasonNoOutput)
	require.False(t, listen)
	require.NotEqual(t, "item_speech", it.ID)
	require.Equal(t, "item_speech", in.speechItemID, "left for the transcript's item")
	require.Empty(t, rs.settleListen(), "no transcript yet")
	rs.heard(2)
	require.Empty(t, rs.settleListen(), "its turn is not over")
	rs.closeTurn(2)
	require.Equal(t, ReasonNoOutput, rs.settleListen(), "over without a response: the listen")
}
