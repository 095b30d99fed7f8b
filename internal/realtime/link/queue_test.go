package link

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// drain pops every queued event; done reports whether the writer would stop.
func drain(q *Queue) (types []string, done bool) {
	for {
		ev, ok, done := q.pop()
		if !ok {
			return types, done
		}
		types = append(types, ev.Type)
	}
}

// The connection's half of the epoch fence: DropStale removes queued model output of older
// epochs (and only that) and refuses later arrivals of it. (An event popped before the fence
// moved is skipped by the stream, which checks the epoch under its own lock: stream_test.go.)
func TestOutQueueEpochFence(t *testing.T) {
	q := NewQueue(16, 1<<20, false)
	for _, ev := range []Event{
		{Type: "delta.e0", Epoch: 0, Model: true},
		{Type: "done.e0", Epoch: 0}, // lifecycle events are never fenced
		{Type: "delta.e1", Epoch: 1, Model: true},
	} {
		require.NoError(t, q.Send(ev))
	}
	q.DropStale(1)
	require.NoError(t, q.Send(Event{Type: "late.e0", Epoch: 0, Model: true}), "refused silently")
	q.DropStale(0) // the fence never moves back
	require.NoError(t, q.Send(Event{Type: "late2.e0", Epoch: 0, Model: true}))

	got, done := drain(q)
	require.False(t, done)
	require.Equal(t, []string{"done.e0", "delta.e1"}, got)

	q.Close()
	_, done = drain(q)
	require.True(t, done)
	require.ErrorIs(t, q.Send(Event{Type: "after"}), ErrConnClosed)
}

// A client that does not read fills the queue: model output fails first (the reserve keeps room
// for the events that end a response), then the queue is failed for good, which is what closes
// the session as slow_client.
func TestOutQueueSlowClient(t *testing.T) {
	const limit = 4
	q := NewQueue(limit, 1<<20, false)
	for range limit {
		require.NoError(t, q.Send(Event{Type: "delta", Model: true}))
	}
	// Past the limit, non-model events still fit in the reserve.
	for range reserve {
		require.NoError(t, q.Send(Event{Type: "response.done"}))
	}
	require.ErrorIs(t, q.Send(Event{Type: "response.done"}), ErrSlowClient)
	require.ErrorIs(t, q.Err(), ErrSlowClient)
	require.ErrorIs(t, q.Send(Event{Type: "session.closed"}), ErrSlowClient, "failed for good")
	got, done := drain(q)
	require.True(t, done, "the writer stops: nothing more is written to a failed connection")
	require.Empty(t, got)

	// Model output alone fails at the limit.
	q = NewQueue(limit, 1<<20, false)
	for range limit {
		require.NoError(t, q.Send(Event{Type: "delta", Model: true}))
	}
	require.ErrorIs(t, q.Send(Event{Type: "delta", Model: true}), ErrSlowClient)
}

// TestOutQueueBytes: model output fails past the byte bound; the events a client's own item
// echoes (and those that end a response) fit up to twice the bound, then the queue fails too.
func TestOutQueueBytes(t *testing.T) {
	const bound = 1 << 20
	big := func(typ string, model bool) Event {
		return Event{Type: typ, Model: model, Fields: map[string]any{"output": string(make([]byte, 800<<10))}}
	}
	q := NewQueue(16, bound, false)
	require.NoError(t, q.Send(big("conversation.item.added", false)))
	require.NoError(t, q.Send(big("conversation.item.done", false)), "the echo of one item fits past the bound")
	require.NoError(t, q.Err())
	require.ErrorIs(t, q.Send(big("conversation.item.added", false)), ErrSlowClient, "a third is past twice the bound")

	q = NewQueue(16, bound, false)
	require.NoError(t, q.Send(big("response.output_audio.delta", true)))
	require.ErrorIs(t, q.Send(big("response.output_audio.delta", true)), ErrSlowClient, "model output stops at the bound")
}

// TestQueueHeadAge: the age of the oldest undelivered event is what the stall watch reads; it
// follows pops and the epoch fence, and a drained queue has none.
func TestQueueHeadAge(t *testing.T) {
	q := NewQueue(16, 1<<20, false)
	require.Zero(t, q.headAge(time.Now()))
	require.NoError(t, q.Send(Event{Type: "a", Model: true, Epoch: 0}))
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, q.Send(Event{Type: "b", Epoch: 1}))
	require.GreaterOrEqual(t, q.headAge(time.Now()), 20*time.Millisecond)
	q.DropStale(1) // "a" goes: "b" is the head now
	require.Less(t, q.headAge(time.Now()), 20*time.Millisecond)
	_, ok, _ := q.pop()
	require.True(t, ok)
	require.Zero(t, q.headAge(time.Now()))
}
