package realtime

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/session"
)

func types(evs []session.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

// The connection's half of the epoch fence: DropStale removes queued model output of older
// epochs (and only that), refuses later arrivals of it, and makes an event already popped stale.
func TestOutQueueEpochFence(t *testing.T) {
	q := newOutQueue(16)
	for _, ev := range []session.Event{
		{Type: "delta.e0", Epoch: 0, Model: true},
		{Type: "done.e0", Epoch: 0}, // lifecycle events are never fenced
		{Type: "delta.e1", Epoch: 1, Model: true},
	} {
		require.NoError(t, q.Send(ev))
	}
	popped := session.Event{Type: "popped.e0", Epoch: 0, Model: true}
	require.False(t, q.isStale(popped))

	q.DropStale(1)
	require.True(t, q.isStale(popped), "popped before the fence moved, written after")
	require.False(t, q.isStale(session.Event{Epoch: 0}), "not model output")
	require.NoError(t, q.Send(session.Event{Type: "late.e0", Epoch: 0, Model: true}), "refused silently")
	q.DropStale(0) // the fence never moves back
	require.NoError(t, q.Send(session.Event{Type: "late2.e0", Epoch: 0, Model: true}))

	got, done := q.take(nil)
	require.False(t, done)
	require.Equal(t, []string{"done.e0", "delta.e1"}, types(got))

	q.close()
	_, done = q.take(nil)
	require.True(t, done)
	require.ErrorIs(t, q.Send(session.Event{Type: "after"}), ErrConnClosed)
}

// A client that does not read fills the queue: model output fails first (the reserve keeps room
// for the events that end a response), then the queue is failed for good, which is what closes
// the session as slow_client.
func TestOutQueueSlowClient(t *testing.T) {
	const limit = 4
	q := newOutQueue(limit)
	for range limit {
		require.NoError(t, q.Send(session.Event{Type: "delta", Model: true}))
	}
	// Past the limit, non-model events still fit in the reserve.
	for range reserve {
		require.NoError(t, q.Send(session.Event{Type: "response.done"}))
	}
	require.ErrorIs(t, q.Send(session.Event{Type: "response.done"}), ErrSlowClient)
	require.ErrorIs(t, q.err(), ErrSlowClient)
	require.ErrorIs(t, q.Send(session.Event{Type: "session.closed"}), ErrSlowClient, "failed for good")
	got, done := q.take(nil)
	require.True(t, done, "the writer stops: nothing more is written to a failed connection")
	require.Empty(t, got)

	// Model output alone fails at the limit.
	q = newOutQueue(limit)
	for range limit {
		require.NoError(t, q.Send(session.Event{Type: "delta", Model: true}))
	}
	require.ErrorIs(t, q.Send(session.Event{Type: "delta", Model: true}), ErrSlowClient)
}
