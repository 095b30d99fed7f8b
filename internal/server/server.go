// Package server builds the omniserve server from its configuration: the engine, the speech
// models, the stage pipeline, the request client, the realtime session manager and the HTTP
// router over them. It is the one place the parts are wired together; `omniserve serve`, the
// benchmarks (`omniserve bench`) and the end-to-end test fixtures all build their server here,
// so that what they measure and test is the server users run.
//
// Life cycle: New returns at once with a handler that answers the probes (/health 200, /ready
// 503) while Build loads the model; Build swaps in the full router and marks the server ready;
// Drain turns /ready to 503 and refuses new work; Close releases everything in reverse order of
// acquisition. Listening, the HTTP drain and the shutdown timing belong to the caller
// (cmd/omniserve/serve.go).
package server

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
	"github.com/omniserve/omniserve/internal/clientsecret"
	"github.com/omniserve/omniserve/internal/config"
	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/requestclient"
	"github.com/omniserve/omniserve/internal/session"
	"github.com/omniserve/omniserve/internal/speech"
	"github.com/omniserve/omniserve/internal/stage"
	"github.com/omniserve/omniserve/internal/tracing"
)

// WarmDecoders is how many ASR decoders the server builds in the background right after start:
// building one takes about a second, which the first sessions would otherwise each pay on their
// first audio. The pool grows lazily past this (one decoder per live session).
const WarmDecoders = 2

// maxClientSecrets bounds the live minted client secrets (a few hundred bytes each), and
// maxClientSecretBytes the sessions they hold together (one may hold up to
// realtime.max_event_bytes): a mint past either is a 429.
const (
	maxClientSecrets     = 10000
	maxClientSecretBytes = 64 << 20
)

// Options are what a caller adds to the configuration.
type Options struct {
	// Log receives the server's logs and, with server.log_stats, its statistics tables. Nil
	// discards them.
	Log *zap.Logger
	// WrapBackend, when set, wraps the realtime sessions' engine backend. It exists for
	// in-process benchmarks that time the path into the engine; the server leaves it nil.
	WrapBackend func(session.Backend) session.Backend
}

// Parts are the built components, for benchmarks and tests that drive one layer of the server
// directly (the engine, the pipeline, the request client). Zero until Build has made them.
type Parts struct {
	Engine   *gpu.Runner
	ASR      *speech.ASR
	TTS      *speech.TTS // nil without a talker stage
	Pipeline *stage.Pipeline
	Client   *requestclient.Client
	// Backend is what the session manager opens engines on (WrapBackend applied).
	Backend  session.Backend
	Sessions *session.Manager
}

// Server is one omniserve server. Build and Close are each called once, Close after Build has
// returned. Handler, Registry, Ready and Drain are safe at any time; Models, Parts and Sessions
// are set by Build and read after it returns.
type Server struct {
	cfg      config.Config
	opts     Options
	log      *zap.Logger
	reg      *prometheus.Registry
	ready    atomic.Bool
	draining atomic.Bool // set by Drain: new work is refused, probes still answer
	handler  swapHandler

	models      []string
	names       modelNames // what the model answers to; models is names.Listed()
	pipelineCfg stage.PipelineConfig
	parts       Parts
	// secrets are the minted client secrets (ek_ keys); clientSecrets mints them.
	secrets       *clientsecret.Store
	clientSecrets http.Handler           // nil until built
	calls         http.Handler           // nil until built: the WebRTC transport
	chat          http.Handler           // nil until built: the router answers 503
	countPanic    func(component string) // nil until the collectors exist
	tracer        *tracing.Tracer        // nil: tracing off
	realtime      http.Handler           // nil until built
	transcribe    http.Handler           // nil until built
	speech        http.Handler           // nil until built, and without a talker stage
	// sessionLimit is the realtime sessions the local engine's KV plan holds (kvSessionLimit);
	// 0 without a local engine.
	sessionLimit int
	// seqContext is one KV sequence's context (n_ctx) of the local engine; 0: unknown (remote).
	seqContext int

	warmed  chan struct{} // closed when the ASR warm-up has ended
	closers []namedCloser
}

type namedCloser struct {
	name string
	fn   func(context.Context) error
}

// New returns a server whose handler answers the probes only; Build makes the rest.
func New(cfg config.Config, opts Options) *Server {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	s := &Server{cfg: cfg, opts: opts, log: opts.Log, reg: reg, warmed: make(chan struct{}),
		secrets: clientsecret.NewStore(maxClientSecrets, nil).WithMaxBytes(maxClientSecretBytes).WithMaxOpens(cfg.Server.ClientSecretMaxSessions)}
	s.handler.set(s.router()) // probes only until the components exist: /ready is 503
	return s
}

// Handler is the server's HTTP handler; it stays the same value across Build.
func (s *Server) Handler() http.Handler { return &s.handler }

// Registry is the Prometheus registry /metrics serves.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Models are the model ids /v1/models lists; nil before Build.
func (s *Server) Models() []string { return s.models }

// Parts returns the built components.
func (s *Server) Parts() Parts { return s.parts }

// Ready reports whether Build succeeded and Drain has not been called: what /ready answers.
func (s *Server) Ready() bool { return s.ready.Load() }

// Sessions is the realtime session manager, nil until Build made it; the shutdown sequence
// closes its sessions (Shutdown) before the HTTP drain ends.
func (s *Server) Sessions() *session.Manager { return s.parts.Sessions }

// Warmed is closed when the background ASR warm-up that Build starts has ended (done,
// failed or cancelled by Close). Benchmarks wait for it so that they measure the steady state,
// not start-up; it is never closed if Build fails before the warm-up starts.
func (s *Server) Warmed() <-chan struct{} { return s.warmed }

// Drain starts the shutdown: /ready answers 503, the router refuses new work, and live realtime
// sessions are told (session.closing). Closing them is the caller's next step (Sessions().Shutdown).
func (s *Server) Drain() {
	s.ready.Store(false)
	s.draining.Store(true)
	if m := s.parts.Sessions; m != nil {
		m.Drain()
	}
}

// Build runs the start-up steps in order: engine, speech, pipeline, realtime. On success the
// full router serves and the server is ready. On error the steps already done stay registered
// for Close, which the caller still calls.
func (s *Server) Build(ctx context.Context) error {
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"engine", s.buildEngine},
		{"speech", s.buildSpeech},
		{"pipeline", s.buildPipeline},
		{"realtime", s.buildRealtime},
	}
	for _, st := range steps {
		start := time.Now()
		if err := st.fn(ctx); err != nil {
			return fmt.Errorf("starting %s: %w", st.name, err)
		}
		s.log.Info("started "+st.name, zap.Duration("took", time.Since(start)))
	}
	s.warmASR()
	s.handler.set(s.router())
	s.ready.Store(true)
	return nil
}

func (s *Server) onClose(name string, fn func(context.Context) error) {
	s.closers = append(s.closers, namedCloser{name: name, fn: fn})
}

// Close runs the closers in reverse order of acquisition (realtime sessions, pipeline, speech,
// engine) and logs one line each. ctx bounds the whole run: a closer that ignores it (a wedged
// stage) is left behind when ctx ends, and the closers after it are skipped, since they would
// free what it may still use.
func (s *Server) Close(ctx context.Context) {
	s.ready.Store(false)
	for i := len(s.closers) - 1; i >= 0; i-- {
		cl := s.closers[i]
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- cl.fn(ctx) }()
		var err error
		select {
		case err = <-done:
		case <-ctx.Done():
			skipped := make([]string, 0, i)
			for j := i - 1; j >= 0; j-- {
				skipped = append(skipped, s.closers[j].name)
			}
			s.log.Error("shutdown: deadline reached; exiting without waiting for "+cl.name,
				zap.Duration("took", time.Since(start)), zap.Strings("skipped", skipped), zap.NamedError("cause", context.Cause(ctx)))
			s.closers = nil
			return
		}
		if err != nil {
			s.log.Warn("shutdown: closing "+cl.name+" failed", zap.Error(err), zap.Duration("took", time.Since(start)))
			continue
		}
		s.log.Info("shutdown: closed "+cl.name, zap.Duration("took", time.Since(start)))
	}
	s.closers = nil
}

// router builds the HTTP handler from what exists so far.
func (s *Server) router() http.Handler {
	models := s.models
	if models == nil {
		models = []string{}
	}
	return api.NewRouter(api.RouterDeps{
		Log:            s.log,
		APIKey:         s.cfg.Server.APIKey,
		Ready:          s.ready.Load,
		Draining:       s.draining.Load,
		Models:         models,
		AcceptModel:    s.names.Accepts,
		Chat:           s.chat,
		Realtime:       s.realtime,
		Transcriptions: s.transcribe,
		Speech:         s.speech,
		// OpenMetrics when the scraper asks for it (Accept: application/openmetrics-text):
		// only that format carries the latency histograms' trace-id exemplars.
		Metrics:       promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg, EnableOpenMetrics: true}),
		MaxBodyBytes:  s.cfg.Server.MaxBodyBytes,
		CORSOrigins:   api.ResolveOrigins(s.cfg.Server.CORSOrigins, s.cfg.Server.APIKey != ""),
		Secrets:       s.secrets,
		ClientSecrets: s.clientSecrets,
		// A minted session is bounded as session.update is.
		SecretSessionBytes: s.cfg.Realtime.MaxEventBytes,
		Calls:              s.calls,
		CountPanic:         s.countPanic,
	})
}

// ConnContext is the http.Server ConnContext the server's listener needs: the realtime
// endpoint sizes the send buffer of the connections it upgrades.
var ConnContext = realtime.ConnContext

// swapHandler lets the server answer probes while the model loads and switch to the full
// router once every component exists, without restarting the listener.
type swapHandler struct{ h atomic.Pointer[http.Handler] }

func (sw *swapHandler) set(h http.Handler) { sw.h.Store(&h) }

func (sw *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*sw.h.Load()).ServeHTTP(w, r)
}

// ModelID is the public id of an engine.model value: "dummy..." as given, else the file's base
// name without its .gguf extension. It is the id clients send as "model" and the model_name of
// every metric; a path would leak the server's file layout to /v1/models and /metrics, which
// are open.
func ModelID(model string) string {
	if model == "" || model == "dummy" || strings.HasPrefix(model, "dummy:") {
		return model
	}
	return strings.TrimSuffix(filepath.Base(model), ".gguf")
}

// EngineConfig maps the engine settings onto internal/gpu's; zero sizes keep the engine
// defaults.
func EngineConfig(e config.Engine) gpu.Config {
	lo, hi, _ := e.DummyReplyRange() // validated with the configuration; 0, 0 is the default
	return gpu.Config{
		DummyReplyMin: lo, DummyReplyMax: hi,
		Model:        e.Model,
		CacheDir:     e.CacheDir,
		Device:       e.Device,
		GPULayers:    e.GPULayers,
		Threads:      e.Threads, // 0: the engine's default, all cores but one
		ContextSize:  e.ContextSize,
		MaxSequences: e.MaxSequences,
		BatchSize:    e.BatchSize,
		PrefillChunk: e.PrefillChunk,
		SeqContext:   e.SeqContext,
		Overflow:     e.Overflow,
		// Empty is the engine's auto (off on the CPU).
		FlashAttention: e.FlashAttention,
	}
}
