package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"go.uber.org/zap"
)

// debugServer serves Go's profiler on an address of its own (--debug-addr), so that an operator
// can profile a live server (go tool pprof http://127.0.0.1:6060/debug/pprof/profile) without
// exposing it on the API's port. It has no authentication: the address should be loopback.
type debugServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// addr is the address it listens on.
func (d *debugServer) addr() string { return d.ln.Addr().String() }

// startDebug listens on addr and serves /debug/pprof/ until stop.
func startDebug(ctx context.Context, addr string, log *zap.Logger) (*debugServer, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("debug listener on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	d := &debugServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: zap.NewStdLog(log.Named("debug"))}, ln: ln, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		if err := d.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("debug listener failed", zap.Error(err))
		}
	}()
	log.Info("profiler listening", zap.Stringer("addr", ln.Addr()))
	return d, nil
}

// stop closes the listener and any profile in progress, and waits for the serving goroutine.
func (d *debugServer) stop() {
	if d == nil {
		return
	}
	_ = d.srv.Close()
	<-d.done
}
