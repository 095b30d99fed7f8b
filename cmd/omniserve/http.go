package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// swapHandler lets the server answer probes while the model loads and switch to the full
// router once every component exists, without restarting the listener.
type swapHandler struct{ h atomic.Pointer[http.Handler] }

func (s *swapHandler) set(h http.Handler) { s.h.Store(&h) }

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// httpServer owns the serving goroutine. stopped is closed when it ends; err is its result
// and is read only after stopped is closed.
type httpServer struct {
	log     *zap.Logger
	srv     *http.Server
	stopped chan struct{}
	err     error
}

func startHTTP(log *zap.Logger, ln net.Listener, h http.Handler, tlsCfg *tls.Config) *httpServer {
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 10 * time.Second, // no write timeout: SSE and WebSocket responses are long
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
	}
	hs := &httpServer{log: log, srv: srv, stopped: make(chan struct{})}
	go func() {
		var err error
		if tlsCfg != nil {
			err = srv.ServeTLS(ln, "", "")
		} else {
			err = srv.Serve(ln)
		}
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		hs.err = err
		close(hs.stopped)
	}()
	return hs
}

// drain stops accepting, lets in-flight requests finish for up to timeout, then closes what
// is left, and waits for the serving goroutine. Hijacked WebSocket connections are not seen
// by http.Server.Shutdown; the realtime closer registered in components ends them.
func (hs *httpServer) drain(ctx context.Context, timeout time.Duration) {
	start := time.Now()
	hs.log.Info("shutdown: stopped accepting; draining in-flight requests", zap.Duration("timeout", timeout))
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := hs.srv.Shutdown(sctx); err != nil {
		hs.log.Warn("shutdown: drain timed out; closing remaining connections", zap.Duration("after", time.Since(start)), zap.Error(err))
		_ = hs.srv.Close()
	} else {
		hs.log.Info("shutdown: drained", zap.Duration("took", time.Since(start)))
	}
	<-hs.stopped
}
