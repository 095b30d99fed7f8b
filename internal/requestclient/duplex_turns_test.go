package requestclient

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/metrics"
)

// newBegunTurn is a turn whose response began, started and responding as given.
func newBegunTurn(t *testing.T, started bool, responding int) *turn {
	t.Helper()
	e := &turn{id: 1, t: metrics.NewInputTurn("req", 10, 2, func() float64 { return 20 })}
	require.True(t, e.begin("resp", 1))
	e.started, e.responding = started, responding
	return e
}

// TestTurnClose is the owner's close: whether the record is made now or waits for the stages.
func TestTurnClose(t *testing.T) {
	tests := []struct {
		reason       string
		started      bool
		responding   int
		streamClosed bool
		recordNow    bool
	}{
		// A natural end is recorded at once whatever runs: its stages already reported.
		{metrics.ReasonStop, true, 1, false, true},
		{metrics.ReasonLength, true, 0, false, true},
		// An interrupted turn whose response started, or may still start, waits for TurnEnd.
		{metrics.ReasonBargeIn, true, 0, false, false},
		{metrics.ReasonCancel, false, 1, false, false},
		{metrics.ReasonAbort, true, 1, false, false},
		{metrics.ReasonError, true, 0, false, false},
		{metrics.ReasonClose, true, 0, false, false},
		{"", true, 0, false, false}, // an unknown reason is an abort
		// ... unless the stream is closed: nothing more will arrive.
		{metrics.ReasonBargeIn, true, 0, true, true},
		{metrics.ReasonCancel, false, 1, true, true},
		// An interrupted turn with no response running or starting has nothing to wait for.
		{metrics.ReasonCancel, false, 0, false, true},
		{metrics.ReasonBargeIn, false, 0, true, true},
	}
	for _, tt := range tests {
		e := newBegunTurn(t, tt.started, tt.responding)
		closed, now := e.close(tt.reason, tt.streamClosed)
		require.True(t, closed, "%+v", tt)
		require.Equal(t, tt.recordNow, now, "%+v", tt)
		require.Equal(t, tt.reason, e.reason)

		closed, now = e.close(metrics.ReasonStop, true)
		require.False(t, closed, "a turn is closed once: %+v", tt)
		require.False(t, now)
		require.Equal(t, tt.reason, e.reason, "the first reason stays")
	}
}

func TestTurnCloseRefused(t *testing.T) {
	var none *turn
	closed, now := none.close(metrics.ReasonStop, false)
	require.False(t, closed || now, "no turn")

	e := &turn{id: 1, t: metrics.NewInputTurn("req", 10, 1, nil)}
	closed, now = e.close(metrics.ReasonStop, false)
	require.False(t, closed || now, "a turn not begun has no owner to close it")
	closed, now = e.closeUnstarted(metrics.ReasonCancel, true)
	require.False(t, closed || now)
	require.False(t, e.begin("", 1), "no response id: not begun")
	require.True(t, e.begin("resp", 1))
	require.False(t, e.begin("resp-2", 2), "a turn begins once")
}

// TestTurnStagesReported: an interrupted turn waiting for its stages is recorded at TurnEnd; a
// TurnEnd before the close makes the close record at once.
func TestTurnStagesReported(t *testing.T) {
	e := newBegunTurn(t, true, 0)
	require.False(t, e.stagesReported(30), "open: the owner has not closed it")
	closed, now := e.close(metrics.ReasonBargeIn, false)
	require.True(t, closed)
	require.True(t, now, "its stages already reported")

	e = newBegunTurn(t, true, 0)
	closed, now = e.close(metrics.ReasonBargeIn, false)
	require.True(t, closed)
	require.False(t, now)
	require.True(t, e.stagesReported(30), "closed and reported: record now")

	e = newBegunTurn(t, false, 1)
	closed, now = e.closeUnstarted(metrics.ReasonCancel, false)
	require.True(t, closed)
	require.False(t, now)
	require.False(t, e.stagesReported(30), "an unstarted turn waits for its input, not its response")
	require.True(t, e.waitsForInput())
}

// TestTurnRespondEnded: a closed turn is recorded when its last Respond call returns without
// starting its response.
func TestTurnRespondEnded(t *testing.T) {
	tests := []struct {
		name       string
		closing    bool
		started    bool
		responding int
		recordNow  bool
	}{
		{"open", false, false, 1, false},
		{"closed, last call, not started", true, false, 1, true},
		{"closed, another call in flight", true, false, 2, false},
		{"closed, started", true, true, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newBegunTurn(t, tt.started, tt.responding)
			if tt.closing {
				_, now := e.close(metrics.ReasonCancel, false)
				require.False(t, now)
			}
			require.Equal(t, tt.recordNow, e.respondEnded())
			require.Equal(t, tt.responding-1, e.responding)
		})
	}
	var none *turn
	require.False(t, none.respondEnded())

	e := newBegunTurn(t, false, 1)
	_, now := e.closeUnstarted(metrics.ReasonCancel, false)
	require.False(t, now)
	require.False(t, e.respondEnded(), "an unstarted turn waits for its input")
}

func TestTurnCloseUnstarted(t *testing.T) {
	for _, streamClosed := range []bool{false, true} {
		e := newBegunTurn(t, false, 0)
		closed, now := e.closeUnstarted(metrics.ReasonCancel, streamClosed)
		require.True(t, closed)
		require.Equal(t, streamClosed, now, "recorded now only when nothing more will arrive")
		require.True(t, e.waitsForInput())
		closed, _ = e.close(metrics.ReasonStop, false)
		require.False(t, closed, "closed once")
	}
	e := newBegunTurn(t, false, 0)
	require.False(t, e.waitsForInput(), "open")
	require.True(t, e.closeUnowned(metrics.ReasonClose))
	require.False(t, e.closeUnowned(metrics.ReasonAbort), "closed once")
	require.Equal(t, metrics.ReasonClose, e.reason)
}
