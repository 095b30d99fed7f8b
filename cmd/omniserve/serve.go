package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/config"
	"github.com/omniserve/omniserve/internal/server"
)

func newServeCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the HTTP and realtime server",
		Long: "Run the HTTP and realtime server. Settings come from, highest first: flags, OMNISERVE_* " +
			"environment variables, the YAML file given by --config, built-in defaults.",
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	addConfigFlags(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := resolveConfig(fs, a.lookupEnv)
		if err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		// After the first signal, restore the default handlers: a second Ctrl-C during a long
		// drain then ends the process at once, as users expect.
		context.AfterFunc(ctx, stop)
		return a.serve(ctx, a, cfg)
	}
	return cmd
}

// addConfigFlags registers --config and one flag per setting of the key table, the flags of
// every command that resolves the server configuration (serve, config print).
func addConfigFlags(fs *pflag.FlagSet) {
	fs.SortFlags = false
	fs.String("config", config.DefaultPath, `YAML config file; "" for none (env OMNISERVE_CONFIG)`)
	defaults := config.Defaults()
	for _, k := range config.Keys() {
		if k.Flag == "" {
			continue
		}
		usage := k.Usage + " (env " + k.Env() + ")"
		switch v := k.Value(&defaults).(type) {
		case string:
			fs.String(k.Flag, v, usage)
		case int:
			fs.Int(k.Flag, v, usage)
		case int64:
			fs.Int64(k.Flag, v, usage)
		case bool:
			fs.Bool(k.Flag, v, usage)
		case time.Duration:
			fs.Duration(k.Flag, v, usage)
		}
	}
}

// resolveConfig applies the precedence rules to the flags the user actually set.
func resolveConfig(fs *pflag.FlagSet, lookupEnv func(string) (string, bool)) (config.Config, error) {
	src := config.Sources{Lookup: lookupEnv}
	fs.Visit(func(f *pflag.Flag) {
		if f.Name == "config" {
			src.ConfigFlag, src.ConfigFlagSet = f.Value.String(), true
			return
		}
		src.Flags = append(src.Flags, config.FlagValue{Name: f.Name, Value: f.Value.String()})
	})
	return config.Resolve(src)
}

// runServer is the life of one server process: listen, build the components while /health
// answers, serve, and on ctx's end drain and close everything in reverse order.
func runServer(ctx context.Context, a *app, cfg config.Config) error {
	log, err := newLogger(cfg.Server, a.stderr)
	if err != nil {
		return withExitCode(exitFailure, err)
	}
	defer func() { _ = log.Sync() }()

	tlsCfg, err := loadTLS(cfg.Server)
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(cfg.Server.Host, strconv.Itoa(cfg.Server.Port))
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return withExitCode(exitFailure, fmt.Errorf("listening on %s: %w", addr, err))
	}
	log.Info("listening", zap.Stringer("addr", ln.Addr()), zap.Bool("tls", tlsCfg != nil),
		zap.String("config", cfg.Path), zap.String("model", cfg.Engine.Model))
	if cfg.Server.DebugAddr != "" {
		dbg, err := startDebug(ctx, cfg.Server.DebugAddr, log)
		if err != nil {
			_ = ln.Close()
			return withExitCode(exitFailure, err)
		}
		defer dbg.stop()
	}

	srv := server.New(cfg, server.Options{Log: log})
	hs := startHTTP(log, ln, srv.Handler(), tlsCfg)
	if a.listening != nil {
		a.listening(ln.Addr())
	}

	buildErr := srv.Build(ctx)
	switch {
	case buildErr != nil && ctx.Err() == nil:
		log.Error("start-up failed", zap.Error(buildErr))
		shutdown(context.WithoutCancel(ctx), cfg.Server, hs, srv, log)
		return withExitCode(exitFailure, buildErr)
	case buildErr == nil:
		log.Info("ready", zap.Stringer("addr", ln.Addr()), zap.Strings("models", srv.Models()))
	}

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutdown: signal received; /ready now answers 503", zap.NamedError("cause", context.Cause(ctx)))
	case <-hs.stopped:
		serveErr = hs.err
		if serveErr == nil {
			serveErr = errors.New("http server stopped unexpectedly")
		}
		log.Error("http server failed", zap.Error(serveErr))
	}
	shutdown(context.WithoutCancel(ctx), cfg.Server, hs, srv, log)
	log.Info("shutdown: complete")
	if serveErr != nil {
		return withExitCode(exitFailure, serveErr)
	}
	return nil
}

// shutdown keeps the promise of --shutdown-timeout and --drain-grace: /ready turns 503 and new
// work is refused at once while the listener stays up for probes; live realtime sessions are
// told at once (session.closing) and closed after the drain grace (session.closed{reason:
// "shutdown"}); in-flight requests run until the cut, shortly before the timeout, when chats
// are ended with an error chunk; then the components close in what is left of the timeout. The
// whole shutdown ends within ShutdownTimeout even when a stage ignores its context.
func shutdown(ctx context.Context, s config.Server, hs *httpServer, srv *server.Server, log *zap.Logger) {
	start := time.Now()
	deadline := start.Add(s.ShutdownTimeout)
	// The closers (pipeline, speech, engine) get the last part of the timeout.
	cutAt := deadline.Add(-min(5*time.Second, s.ShutdownTimeout/4))
	srv.Drain()
	cutCtx, cancelCut := context.WithDeadline(ctx, cutAt)
	defer cancelCut()
	done := make(chan struct{})
	if m := srv.Sessions(); m != nil {
		go func() {
			defer close(done)
			if err := m.Shutdown(cutCtx); err != nil {
				log.Warn("shutdown: realtime sessions", zap.Error(err))
			}
		}()
	} else {
		close(done)
	}
	margin := deadline.Sub(cutAt)
	hs.drain(cutCtx, cutAt, cutAt.Add(margin/2))
	<-done // bounded by cutCtx
	closeCtx, cancelClose := context.WithDeadline(ctx, deadline)
	defer cancelClose()
	srv.Close(closeCtx)
}

// loadTLS reads the certificate pair up front, so that a bad file is a start-up error naming
// the file rather than a failure of the first handshake.
func loadTLS(s config.Server) (*tls.Config, error) {
	if s.TLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(s.TLSCertFile, s.TLSKeyFile)
	if err != nil {
		return nil, &config.Error{Source: "server.tls_cert_file", Msg: fmt.Sprintf("loading TLS pair %q / %q: %v", s.TLSCertFile, s.TLSKeyFile, singleLine(err.Error())), Err: err}
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
