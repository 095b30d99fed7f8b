package tracing

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A collector that accepts connections and never answers (black-holed) costs Shutdown at most
// FlushTimeout, whatever deadline the caller gives it: the closers after it (the engine) still run.
func TestShutdownBlackHoledCollector(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	tr, err := New(context.Background(), Config{Endpoint: "http://" + ln.Addr().String()}, nil)
	require.NoError(t, err)
	require.NotNil(t, tr)
	for range 10 {
		_, span := tr.tr.Start(context.Background(), TurnSpanName)
		span.End()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 31*time.Second)
	defer cancel()
	start := time.Now()
	err = tr.Shutdown(ctx)
	took := time.Since(start)
	require.Error(t, err, "the spans could not be flushed")
	require.Less(t, took, FlushTimeout+time.Second, "took %s", took)
}
