package stage

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConnectorAccounting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newConnector(0, 1, 4)
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
	require.GreaterOrEqual(t, rx.InFlightMs, 4*5.0)
	require.GreaterOrEqual(t, rx.DecodeMs, 0.0)

	require.NoError(t, c.End(ctx, FinishLength))
	_, end, reason, err := c.Recv(ctx)
	require.NoError(t, err)
	require.True(t, end)
	require.Equal(t, FinishLength, reason)
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
