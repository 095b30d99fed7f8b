package session

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A close is held only while a commit the engine decides has no outcome: a response that began
// settles every commit before it, a listen with a reason one, the running response one
// (settle); the engine's plain listens settle nothing.
func TestCloseWait(t *testing.T) {
	tests := []struct {
		name    string
		commits int
		steps   []any // Effect to observe, or "settle"
		due     []bool
	}{
		{"nothing owed: at once", 0, nil, nil},
		{"a response began", 2, []any{ResponseStarted{}}, []bool{true}},
		{"a plain listen is no outcome", 1, []any{TurnDecision{}, TurnDecision{Speak: true}}, []bool{false, false}},
		{"listens with reasons, one each", 2, []any{TurnDecision{Reason: ReasonNoOutput}, TurnDecision{Reason: ReasonSilence}}, []bool{false, true}},
		{"the running response", 1, []any{"settle"}, []bool{true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var w closeWait
			defer w.stop()
			for range tc.commits {
				w.decided()
			}
			held := w.hold(ReasonClientClose)
			require.Equal(t, tc.commits > 0, held)
			if !held {
				require.Nil(t, w.timerC(), "no bound armed")
				return
			}
			require.NotNil(t, w.timerC())
			require.True(t, w.hold(ReasonClientClose), "a second close while one is held")
			for i, st := range tc.steps {
				var due bool
				if st == "settle" {
					due = w.settle()
				} else {
					due = w.observe(st.(Effect))
				}
				require.Equal(t, tc.due[i], due, "step %d", i)
			}
		})
	}
}
