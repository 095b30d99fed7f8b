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
			it, evs, listen := emptyCommit(conv, &rs, "", 0, 0, ReasonNoOutput)
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
