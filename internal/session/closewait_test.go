package session

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A close is held only while a commit the engine decides has no outcome: a response that began
// settles every commit before it, a listen with a reason one, the running response one
// (settled); the engine's plain listens settle nothing. Past the bound the close goes on.
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
			expire := func(string) { t.Error("the bound fired") }
			held := w.hold(ReasonClientClose, expire)
			require.Equal(t, tc.commits > 0, held)
			if !held {
				require.Nil(t, w.bound, "no bound armed")
				return
			}
			require.True(t, w.hold(ReasonClientClose, expire), "a second close while one is held")
			for i, st := range tc.steps {
				var due bool
				if st == "settle" {
					due = w.settled(true, "") == ReasonClientClose
				} else {
					due = w.observe(st.(Effect))
				}
				require.Equal(t, tc.due[i], due, "step %d", i)
			}
		})
	}
}

// A running response settles nothing when none runs, and a close that came first stands.
func TestCloseWaitSettled(t *testing.T) {
	var w closeWait
	defer w.stop()
	w.decided()
	require.True(t, w.hold(ReasonClientClose, func(string) {}))
	require.Empty(t, w.settled(false, ""), "no response runs: still owed")
	require.Equal(t, ReasonSlowClient, w.settled(true, ReasonSlowClient))
	require.Equal(t, ReasonClientClose, w.settled(true, ""))
}

// Past its bound a held close goes on: expire is told the close's reason.
func TestCloseWaitBound(t *testing.T) {
	var w closeWait
	w.decided()
	got := make(chan string, 1)
	require.True(t, w.hold(ReasonClientClose, func(r string) { got <- r }))
	w.bound.Reset(time.Millisecond)
	select {
	case r := <-got:
		require.Equal(t, ReasonClientClose, r)
	case <-time.After(5 * time.Second):
		t.Fatal("the bound never fired")
	}
	w.stop()
}

// While a close is held, what changes no conversation still applies; the rest is refused.
func TestAfterClose(t *testing.T) {
	for _, tc := range []struct {
		c    Command
		want bool
	}{
		{&Heartbeat{}, true},
		{&PlaybackAck{}, true},
		{&CloseSession{}, true},
		{&InputActivity{}, false},
		{&CommitInput{}, false},
		{&AppendAudio{}, false},
		{&CreateItem{}, false},
		{&CreateResponse{}, false},
		{&UpdateSession{}, false},
	} {
		require.Equal(t, tc.want, afterClose(tc.c), "%T", tc.c)
	}
}
