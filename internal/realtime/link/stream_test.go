package link

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func frameSeqTypes(t *testing.T, frames [][]byte) (seqs []int64, types []string) {
	t.Helper()
	for _, f := range frames {
		var m map[string]any
		require.NoError(t, json.Unmarshal(f, &m))
		seqs = append(seqs, int64(m["server_event_seq"].(float64)))
		types = append(types, m["type"].(string))
	}
	return seqs, types
}

// TestStreamNumbersAcrossDetach: events written, events still queued at the drop and events
// sent while detached are numbered 1..n once each, in send order, and a resume replays exactly
// those after the client's last seq; stale model output is dropped without using a number.
func TestStreamNumbersAcrossDetach(t *testing.T) {
	st := NewStream(false, NewJournal(1<<20, 1024))
	q := NewQueue(8, 1<<20, true)
	st.Attach(q, 0)
	ev := func(typ string, epoch int, model bool) Event {
		return Event{Type: typ, Epoch: epoch, Model: model, Fields: map[string]any{}}
	}
	require.NoError(t, st.Send(ev("a", 0, false)))
	require.NoError(t, st.Send(ev("b", 0, true)))
	data, done, err := st.next(q) // the writer writes a
	require.NoError(t, err)
	require.False(t, done)
	require.NotNil(t, data)
	st.DropStale(1) // b is stale: never numbered
	require.NoError(t, st.Send(ev("c", 1, false)))
	st.Detach(q) // c was still queued: journaled now
	_, _, err = st.next(q)
	require.ErrorIs(t, err, errDetached, "the lost connection's writer stops")
	require.NoError(t, st.Send(ev("d", 1, true)))
	require.NoError(t, st.Send(ev("e", 0, true)), "stale while detached: dropped")

	q2 := NewQueue(8, 1<<20, true)
	replay, complete := st.Attach(q2, 1)
	require.True(t, complete)
	seqs, types := frameSeqTypes(t, replay)
	require.Equal(t, []int64{2, 3}, seqs)
	require.Equal(t, []string{"c", "d"}, types)
	require.NoError(t, st.Send(ev("f", 1, false)))
	data, _, err = st.next(q2)
	require.NoError(t, err)
	seqs, types = frameSeqTypes(t, [][]byte{data})
	require.Equal(t, []int64{4}, seqs)
	require.Equal(t, []string{"f"}, types)
}

// TestStreamOverflowKeepsEvents: a resumable session's queue that overflows fails the
// connection but loses nothing: it is detached at once and its events, and every later one,
// go to the journal (bounded), not into the failed queue while its writer waits out a write.
func TestStreamOverflowKeepsEvents(t *testing.T) {
	st := NewStream(false, NewJournal(1<<20, 1024))
	q := NewQueue(2, 1<<20, true)
	st.Attach(q, 0)
	for i := 0; i < 2+reserve+10; i++ {
		require.NoError(t, st.Send(Event{Type: "x", Model: true, Fields: map[string]any{}}), "event %d", i)
		if i >= 2 {
			require.Empty(t, q.takeAll(), "event %d: a failed queue holds nothing", i)
		}
	}
	require.ErrorIs(t, q.Err(), ErrSlowClient, "the connection is failed")
	_, done, err := st.next(q)
	require.ErrorIs(t, err, errDetached, "its writer stops")
	require.True(t, done)
	st.Detach(q)
	replay, complete := st.Attach(NewQueue(2, 1<<20, true), 0)
	require.True(t, complete)
	require.Len(t, replay, 2+reserve+10)
	seqs, _ := frameSeqTypes(t, replay)
	for i, seq := range seqs {
		require.Equal(t, int64(i+1), seq, "numbered once each, in send order")
	}

	// Without resume the overflow ends the session, as before.
	st = NewStream(false, nil)
	q = NewQueue(2, 1<<20, false)
	st.Attach(q, 0)
	var sendErr error
	for i := 0; i < 4 && sendErr == nil; i++ {
		sendErr = st.Send(Event{Type: "x", Model: true, Fields: map[string]any{}})
	}
	require.ErrorIs(t, sendErr, ErrSlowClient)
}
