package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// While draining, /ready answers 503 "draining" and new chat and realtime requests get 503
// shutting_down, but the probes and the listener keep working.
func TestDrainingRefusesNewWork(t *testing.T) {
	t.Parallel()
	var draining atomic.Bool
	var called atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { called.Add(1); w.WriteHeader(http.StatusOK) })
	srv := newTestServer(t, RouterDeps{Ready: func() bool { return true }, Draining: draining.Load, Chat: h, Realtime: h, Calls: h})
	code, _, _ := do(t, http.MethodGet, srv.URL+"/ready", nil, "")
	require.Equal(t, http.StatusOK, code)

	draining.Store(true)
	code, _, body := do(t, http.MethodGet, srv.URL+"/ready", nil, "")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, string(body), "draining")
	code, _, _ = do(t, http.MethodGet, srv.URL+"/health", nil, "")
	require.Equal(t, http.StatusOK, code)
	code, _, body = do(t, http.MethodPost, srv.URL+"/v1/chat/completions", nil, "{}")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, string(body), "shutting_down")
	code, _, _ = do(t, http.MethodGet, srv.URL+"/v1/realtime", nil, "")
	require.Equal(t, http.StatusServiceUnavailable, code)
	// New sessions of every kind, and the sidebands that would join running ones.
	for _, rq := range []struct{ method, path string }{
		{http.MethodGet, "/v1/live/sessions"},
		{http.MethodPost, "/v1/live/sessions"},
		{http.MethodPost, "/v1/realtime/calls"},
		{http.MethodGet, "/v1/live/sessions/live_x/attach"},
		{http.MethodGet, "/v1/realtime?call_id=rtc_x"},
	} {
		code, _, body = do(t, rq.method, srv.URL+rq.path, nil, "")
		require.Equal(t, http.StatusServiceUnavailable, code, "%s %s", rq.method, rq.path)
		require.Contains(t, string(body), "shutting_down", "%s %s", rq.method, rq.path)
	}
	require.Zero(t, called.Load())
	// A call's hang-up still reaches its call: it ends a session, it does not open one.
	code, _, _ = do(t, http.MethodPost, srv.URL+"/v1/realtime/calls/rtc_x/hangup", nil, "")
	require.Equal(t, http.StatusOK, code)
}

// A body trickling in at 1 byte/s is cut at the body read timeout; a body read in time lifts
// the deadline, so a long answer after it is not cut.
func TestBodyReadTimeout(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		time.Sleep(600 * time.Millisecond) // longer than the read timeout: a slow answer
		_, _ = io.WriteString(w, "answered")
	})
	srv := newTestServer(t, RouterDeps{Chat: h, BodyReadTimeout: 300 * time.Millisecond})
	code, _, body := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", nil, "{}")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "answered", string(body))

	conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
	require.NoError(t, err)
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { // 1 byte/s until the server gives up
		for ctx.Err() == nil {
			if _, err := conn.Write([]byte("a")); err != nil {
				done <- err
				return
			}
			time.Sleep(time.Second)
		}
		done <- ctx.Err()
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	}
	require.Less(t, time.Since(start), 5*time.Second, "the slow body was cut")
	cancel()
	conn.Close()
	<-done
}
