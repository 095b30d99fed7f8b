package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/omniserve/omniserve/internal/api"
	"github.com/omniserve/omniserve/internal/config"
)

// syncBuffer is a bytes.Buffer safe for the logger goroutine and the test reading it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// TestRunServerLifecycle starts the real server function on a free port, checks the probes and
// the model list, then ends it as a signal would and checks the shutdown phases.
func TestRunServerLifecycle(t *testing.T) {
	cfg := config.Defaults()
	cfg.Server.Host, cfg.Server.Port = "127.0.0.1", 0
	cfg.Server.LogFormat = "json"
	cfg.Server.ShutdownTimeout = 5 * time.Second
	cfg.Engine.CacheDir = t.TempDir()

	logs := &syncBuffer{}
	addrCh := make(chan net.Addr, 1)
	a := &app{stdout: io.Discard, stderr: logs, lookupEnv: func(string) (string, bool) { return "", false },
		listening: func(addr net.Addr) { addrCh <- addr }}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- runServer(ctx, a, cfg) }()
	var base string
	select {
	case addr := <-addrCh:
		base = "http://" + addr.String()
	case err := <-done:
		t.Fatalf("server ended early: %v\n%s", err, logs.String())
	}

	code, _ := get(t, base+"/health")
	require.Equal(t, http.StatusOK, code)
	require.Eventually(t, func() bool { c, _ := get(t, base+"/ready"); return c == http.StatusOK }, 2*time.Minute, 20*time.Millisecond, logs.String())

	code, body := get(t, base+"/v1/models")
	require.Equal(t, http.StatusOK, code)
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &list))
	require.Equal(t, "list", list.Object)
	require.Len(t, list.Data, 1)
	require.Equal(t, "dummy", list.Data[0].ID)

	code, body = get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), "go_goroutines")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("server did not stop")
	}
	out := logs.String()
	for _, phase := range []string{`"listening"`, `"started engine"`, `"ready"`, "shutdown: signal received",
		"shutdown: draining in-flight requests", "shutdown: drained", "shutdown: closed engine", "shutdown: complete"} {
		require.Contains(t, out, phase)
	}
	_, err := net.Dial("tcp", base[len("http://"):])
	require.Error(t, err, "the listener is closed")
}

func TestRunServerPortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	cfg := config.Defaults()
	cfg.Server.Host = "127.0.0.1"
	cfg.Server.Port = ln.Addr().(*net.TCPAddr).Port
	err = runServer(t.Context(), &app{stderr: io.Discard}, cfg)
	require.Error(t, err)
	require.Equal(t, exitFailure, exitCodeOf(err))
	require.Contains(t, err.Error(), "listening on")
}

// TestDrain checks the HTTP part of graceful shutdown: an in-flight request completes, the
// listener stays up for probes while it runs, and drain returns (closing the listener) once it
// is done.
func TestDrain(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.InfoLevel)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()

	entered := make(chan struct{})
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		close(entered)
		<-release
		_, _ = io.WriteString(w, "finished")
	})
	hs := startHTTP(zap.New(core), ln, h, nil)

	type result struct {
		code int
		body string
		err  error
	}
	inflight := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/slow") //nolint:noctx // bounded by the server under test
		if err != nil {
			inflight <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		inflight <- result{code: resp.StatusCode, body: string(b), err: err}
	}()
	<-entered

	drained := make(chan struct{})
	go func() {
		hs.drain(context.Background(), time.Now().Add(10*time.Second), time.Now().Add(11*time.Second))
		close(drained)
	}()

	// Probes still answer while the old request runs: the listener is kept.
	for range 3 {
		resp, err := http.Get("http://" + addr + "/health") //nolint:noctx // bounded by the server under test
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		time.Sleep(30 * time.Millisecond)
	}
	select {
	case <-drained:
		t.Fatal("drain returned before the in-flight request finished")
	default:
	}

	close(release)
	r := <-inflight
	require.NoError(t, r.err)
	require.Equal(t, http.StatusOK, r.code)
	require.Equal(t, "finished", r.body)
	<-drained
	require.Equal(t, 1, logs.FilterMessage("shutdown: drained").Len())
	_, err = net.DialTimeout("tcp", addr, time.Second)
	require.Error(t, err, "the listener is closed once the drain is done")
}

// TestDrainTimeout checks that a request outliving the timeout is cut off and drain returns.
func TestDrainTimeout(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.InfoLevel)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	entered := make(chan struct{})
	release := make(chan struct{})
	cause := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-release:
		case <-r.Context().Done():
			cause <- context.Cause(r.Context())
		}
	})
	hs := startHTTP(zap.New(core), ln, h, nil)
	clientDone := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String()) //nolint:noctx // bounded by the server under test
		if err == nil {
			resp.Body.Close()
		}
		clientDone <- err
	}()
	<-entered
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	hs.drain(ctx, time.Now().Add(200*time.Millisecond), time.Now().Add(400*time.Millisecond))
	require.Less(t, time.Since(start), 5*time.Second)
	require.Equal(t, 1, logs.FilterMessage("shutdown: cutting in-flight requests").Len())
	// The handler learns why, so a chat stream can end with an error chunk.
	require.ErrorIs(t, <-cause, api.ErrShuttingDown)
	<-clientDone
	close(release)
}
