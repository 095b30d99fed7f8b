package stage

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
)

func TestConnectorAccounting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newConnector(0, 1, 4)
	wall := time.Now()
	var sent int64
	for _, s := range []string{" go", " forward", " ten", "é"} {
		tx, err := c.Send(ctx, s)
		require.NoError(t, err)
		require.Equal(t, int64(len(s)), tx.SizeBytes)
		require.GreaterOrEqual(t, tx.TxMs, 0.0)
		sent += tx.SizeBytes
	}
	time.Sleep(5 * time.Millisecond) // items wait in the queue: in-flight time must show it
	var got string
	for range 4 {
		s, end, _, err := c.Recv(ctx)
		require.NoError(t, err)
		require.False(t, end)
		got += s
	}
	require.Equal(t, " go forward tené", got)
	rx := c.RxStats()
	require.Equal(t, sent, rx.Bytes)
	require.Equal(t, 4, rx.Items)
	// In flight is the union of the items' queue intervals: at least the 5 ms they all waited,
	// never more than the time since the first send (a per-item sum would count 4 × 5 ms).
	require.GreaterOrEqual(t, rx.InFlightMs, 5.0)
	require.LessOrEqual(t, rx.InFlightMs, float64(time.Since(wall))/float64(time.Millisecond))
	require.GreaterOrEqual(t, rx.DecodeMs, 0.0)

	require.NoError(t, c.End(ctx, duplex.FinishLength))
	_, end, reason, err := c.Recv(ctx)
	require.NoError(t, err)
	require.True(t, end)
	require.Equal(t, duplex.FinishLength, reason)
	require.Equal(t, sent, c.RxStats().Bytes, "the end marker carries no bytes")
}

func TestConnectorBoundedAndCancellable(t *testing.T) {
	t.Parallel()
	c := newConnector(0, 1, 2)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := c.Send(ctx, "a")
	require.NoError(t, err)
	_, err = c.Send(ctx, "b")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := c.Send(ctx, "c") // full: waits
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("send on a full connector returned %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Equal(t, 2, c.Drop())
	require.Equal(t, 0, c.Len())
	_, _, _, err = c.Recv(ctx)
	require.ErrorIs(t, err, context.Canceled)
}

func TestSlots(t *testing.T) {
	t.Parallel()
	s := newSlots(1, 1)
	require.NoError(t, s.admit())
	require.NoError(t, s.admit())
	require.ErrorIs(t, s.admit(), ErrQueueFull)
	require.NoError(t, s.acquire(context.Background()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.acquire(ctx), context.Canceled) // undoes its admission
	require.Equal(t, 1, s.Pending())
	s.release()
	require.Equal(t, 0, s.Pending())
}

// A send that waits for room on a full queue reports the wait as backpressure, not as tx time.
func TestConnectorBlockedIsBackpressureNotTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newConnector(0, 1, 1)
	tx, err := c.Send(ctx, "a")
	require.NoError(t, err)
	require.Zero(t, tx.BlockedMs, "room in the queue: no wait")
	got := make(chan txStats, 1)
	go func() {
		tx, err := c.Send(ctx, "b") // full: waits for the receiver
		if err == nil {
			got <- tx
		}
		close(got)
	}()
	time.Sleep(20 * time.Millisecond)
	_, _, _, err = c.Recv(ctx)
	require.NoError(t, err)
	tx, ok := <-got
	require.True(t, ok)
	require.GreaterOrEqual(t, tx.BlockedMs, 10.0, "the wait for room is backpressure")
	require.Less(t, tx.TxMs, tx.BlockedMs, "tx is the hand-off cost only")
	_, _, _, err = c.Recv(ctx)
	require.NoError(t, err)
}
