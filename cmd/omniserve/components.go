package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/api"
	"github.com/omniserve/omniserve/internal/config"
	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/requestclient"
	"github.com/omniserve/omniserve/internal/session"
	"github.com/omniserve/omniserve/internal/speech"
	"github.com/omniserve/omniserve/internal/stage"
)

// components are the parts of a running server, built one step at a time. Each step that
// acquires something registers a closer; close runs them in reverse order, so the realtime
// sessions stop before the pipeline and the pipeline before the engine.
type components struct {
	cfg      config.Config
	log      *zap.Logger
	reg      *prometheus.Registry
	ready    atomic.Bool
	draining atomic.Bool // set at the shutdown signal: new work is refused, probes still answer

	engine      *gpu.Runner
	models      []string
	pipelineCfg stage.PipelineConfig
	asr         *speech.ASR
	tts         *speech.TTS
	pipeline    *stage.Pipeline
	client      *requestclient.Client
	sessions    *session.Manager
	chat        http.Handler // nil until built: the router answers 503
	realtime    http.Handler // nil until built
	transcribe  http.Handler // nil until built
	speech      http.Handler // nil until built, and without a talker stage

	closers []namedCloser
}

type namedCloser struct {
	name string
	fn   func(context.Context) error
}

func newComponents(cfg config.Config, log *zap.Logger) *components {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return &components{cfg: cfg, log: log, reg: reg}
}

// build runs the start-up steps in order. On error the steps already done stay registered in
// closers; the caller closes them.
func (c *components) build(ctx context.Context) error {
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"engine", c.buildEngine},
		{"speech", c.buildSpeech},
		{"pipeline", c.buildPipeline},
		{"realtime", c.buildRealtime},
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("starting %s: %w", s.name, err)
		}
		c.log.Info("started "+s.name, zap.Duration("took", time.Since(start)))
	}
	return nil
}

func (c *components) onClose(name string, fn func(context.Context) error) {
	c.closers = append(c.closers, namedCloser{name: name, fn: fn})
}

// close runs the closers in reverse order and logs one line each. ctx bounds the whole run: a
// closer that ignores it (a wedged stage) is left behind when ctx ends, and the closers after
// it are skipped (they would free what it may still use); the process is exiting.
func (c *components) close(ctx context.Context) {
	for i := len(c.closers) - 1; i >= 0; i-- {
		cl := c.closers[i]
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- cl.fn(ctx) }()
		var err error
		select {
		case err = <-done:
		case <-ctx.Done():
			skipped := make([]string, 0, i)
			for j := i - 1; j >= 0; j-- {
				skipped = append(skipped, c.closers[j].name)
			}
			c.log.Error("shutdown: deadline reached; exiting without waiting for "+cl.name,
				zap.Duration("took", time.Since(start)), zap.Strings("skipped", skipped), zap.NamedError("cause", context.Cause(ctx)))
			c.closers = nil
			return
		}
		if err != nil {
			c.log.Warn("shutdown: closing "+cl.name+" failed", zap.Error(err), zap.Duration("took", time.Since(start)))
			continue
		}
		c.log.Info("shutdown: closed "+cl.name, zap.Duration("took", time.Since(start)))
	}
	c.closers = nil
}

func (c *components) buildEngine(ctx context.Context) error {
	// A remote thinker needs no local model: --model is then only the id served (an invalid
	// pipeline section is reported by buildSpeech).
	if pc, err := pipelineConfig(c.cfg.Pipeline); err == nil && !pc.NeedsLocalEngine() {
		c.models = []string{modelID(c.cfg.Engine.Model)}
		c.log.Info("no local engine: the thinker is remote", zap.String("model_id", c.models[0]))
		return nil
	}
	// llama.cpp and ggml log through the process logger (JSON with --log-format json) from
	// before the model load until the engine is closed.
	stopLlamaLogs := gpu.RouteLlamaLogs(c.log)
	c.onClose("llama logs", func(context.Context) error { stopLlamaLogs(); return nil })
	r, err := loadEngine(ctx, c.cfg.Engine, c.log.Named("engine"))
	if err != nil {
		return err
	}
	c.engine = r
	// The id clients send as "model" and the model_name of every metric: the name they
	// started the server with for dummy models, a .gguf file's base name for a path (a path
	// would leak the server's file layout to /v1/models and /metrics, which are open).
	c.models = []string{modelID(c.cfg.Engine.Model)}
	c.onClose("engine", func(context.Context) error { return r.Close() })
	return nil
}

// router builds the HTTP handler from what exists so far.
func (c *components) router() http.Handler {
	models := c.models
	if models == nil {
		models = []string{}
	}
	return api.NewRouter(api.RouterDeps{
		Log:            c.log,
		APIKey:         c.cfg.Server.APIKey,
		Ready:          c.ready.Load,
		Draining:       c.draining.Load,
		Models:         models,
		Chat:           c.chat,
		Realtime:       c.realtime,
		Transcriptions: c.transcribe,
		Speech:         c.speech,
		Metrics:        promhttp.HandlerFor(c.reg, promhttp.HandlerOpts{Registry: c.reg}),
		MaxBodyBytes:   c.cfg.Server.MaxBodyBytes,
	})
}

// modelID is the public id of a --model value: "dummy..." as given, else the file's base name
// without its .gguf extension.
func modelID(model string) string {
	if model == "" || model == "dummy" || strings.HasPrefix(model, "dummy:") {
		return model
	}
	return strings.TrimSuffix(filepath.Base(model), ".gguf")
}
