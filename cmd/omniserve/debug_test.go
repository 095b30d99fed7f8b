package main

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// The profiler answers on its own address and stops with its owner; a taken address is an
// error at start.
func TestDebugServer(t *testing.T) {
	t.Parallel()
	d, err := startDebug(context.Background(), "127.0.0.1:0", zap.NewNop())
	require.NoError(t, err)
	ln := d.addr()
	resp, err := http.Get("http://" + ln + "/debug/pprof/goroutine?debug=1") //nolint:noctx // loopback, bounded by the test
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "goroutine profile")
	_, err = startDebug(context.Background(), ln, zap.NewNop())
	require.Error(t, err, "the address is taken")
	d.stop()
	_, err = http.Get("http://" + ln + "/debug/pprof/") //nolint:noctx // loopback
	require.Error(t, err, "stopped")
}
