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

	"github.com/omniserve/omniserve/internal/api"
	"github.com/omniserve/omniserve/internal/server"
)

// httpServer owns the serving goroutine. stopped is closed when it ends; err is its result
// and is read only after stopped is closed.
type httpServer struct {
	log     *zap.Logger
	srv     *http.Server
	stopped chan struct{}
	err     error
	// base is every request's parent context; cut cancels it with api.ErrShuttingDown when the
	// shutdown timeout is about to end, so streaming handlers can still tell their clients.
	base     context.Context
	cut      context.CancelCauseFunc
	inflight atomic.Int64 // requests being served, probes excluded
}

func startHTTP(log *zap.Logger, ln net.Listener, h http.Handler, tlsCfg *tls.Config) *httpServer {
	hs := &httpServer{log: log, stopped: make(chan struct{})}
	hs.base, hs.cut = context.WithCancelCause(context.Background())
	hs.srv = &http.Server{
		Handler:           hs.count(h),
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 10 * time.Second, // no write timeout: SSE and WebSocket responses are long; bodies have api's read timeout
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
		BaseContext:       func(net.Listener) context.Context { return hs.base },
		ConnContext:       server.ConnContext,
	}
	srv := hs.srv
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

// count tracks in-flight requests other than the probes, so the drain knows when the work is
// done while the listener stays open for probes.
func (hs *httpServer) count(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health", "/ready", "/metrics":
		default:
			hs.inflight.Add(1)
			defer hs.inflight.Add(-1)
		}
		h.ServeHTTP(w, r)
	})
}

// drain waits, with the listener still open (probes answer; /ready is 503 and new work is
// refused by the router), until no request is in flight or cutAt. At cutAt the requests left
// are cancelled with api.ErrShuttingDown (a chat stream ends with an error chunk) and given
// until stopBy to say so. Then it stops the listener, closes what is left at stopBy, and waits
// for the serving goroutine. Hijacked WebSocket connections are not seen by
// http.Server.Shutdown; the session manager's drain ends them.
func (hs *httpServer) drain(ctx context.Context, cutAt, stopBy time.Time) {
	start := time.Now()
	hs.log.Info("shutdown: draining in-flight requests; listener kept for probes",
		zap.Int64("in_flight", hs.inflight.Load()), zap.Time("cut_at", cutAt))
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for hs.inflight.Load() > 0 && time.Now().Before(cutAt) {
		select {
		case <-tick.C:
		case <-hs.stopped:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	if n := hs.inflight.Load(); n > 0 {
		hs.log.Warn("shutdown: cutting in-flight requests", zap.Int64("in_flight", n), zap.Duration("after", time.Since(start)))
		hs.cut(api.ErrShuttingDown)
	}
	// The cut requests need a moment to write their last words: Shutdown gets until stopBy,
	// not ctx, whose deadline (the cut) has passed by now.
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), stopBy)
	defer cancel()
	if err := hs.srv.Shutdown(sctx); err != nil {
		hs.log.Warn("shutdown: drain timed out; closing remaining connections", zap.Duration("after", time.Since(start)), zap.Error(err))
		_ = hs.srv.Close()
	} else {
		hs.log.Info("shutdown: drained", zap.Duration("took", time.Since(start)))
	}
	hs.cut(nil)
	<-hs.stopped
}
