package server

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"go.uber.org/zap"
	"gopkg.in/yaml.v3"

	"github.com/omniserve/omniserve/internal/api"
	"github.com/omniserve/omniserve/internal/clientsecret"
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/mcpclient"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/realtime/live"
	"github.com/omniserve/omniserve/internal/requestclient"
	"github.com/omniserve/omniserve/internal/session"
	"github.com/omniserve/omniserve/internal/speech"
	"github.com/omniserve/omniserve/internal/stage"
	"github.com/omniserve/omniserve/internal/tracing"
)

// buildEngine loads the model, generating the dummy GGUF on first use; gpu.Load logs what it
// loaded and on which devices.
func (s *Server) buildEngine(ctx context.Context) error {
	// A remote thinker needs no local model: --model is then only the id served (an invalid
	// pipeline section is reported by buildSpeech).
	if pc, err := pipelineConfig(s.cfg.Pipeline); err == nil && !pc.NeedsLocalEngine() {
		s.setModelNames()
		s.log.Info("no local engine: the thinker is remote", zap.String("model_id", s.names.ID()))
		return nil
	}
	// llama.cpp and ggml log through the server's logger (JSON with --log-format json) from
	// before the model load until the engine is closed.
	stopLlamaLogs := gpu.RouteLlamaLogs(s.log)
	s.onClose("llama logs", func(context.Context) error { stopLlamaLogs(); return nil })
	r, err := gpu.Load(ctx, EngineConfig(s.cfg.Engine), s.log.Named("engine"))
	if err != nil {
		return err
	}
	s.parts.Engine = r
	s.setModelNames()
	s.onClose("engine", func(context.Context) error { return r.Close() })
	return nil
}

// pipelineConfig decodes the `pipeline:` section the config loader passed through; an absent
// section gives the built-in default graph.
func pipelineConfig(n yaml.Node) (stage.PipelineConfig, error) {
	if n.Kind == 0 {
		return stage.DefaultPipelineConfig(), nil
	}
	doc, err := yaml.Marshal(map[string]*yaml.Node{"pipeline": &n})
	if err != nil {
		return stage.PipelineConfig{}, fmt.Errorf("re-encoding pipeline section: %w", err)
	}
	return stage.ParsePipelineConfig(doc)
}

// buildSpeech loads the ASR model and the TTS voice the stages run on.
func (s *Server) buildSpeech(context.Context) error {
	pc, err := pipelineConfig(s.cfg.Pipeline)
	if err != nil {
		return err
	}
	s.pipelineCfg = pc
	if pc.NeedsLocalASR() {
		// One decoder per live duplex session plus a few for chat input_audio; the pool grows
		// lazily, so an idle server holds WarmDecoders, not MaxSessions of them (~30 MiB each,
		// on one shared copy of the LM and dictionary).
		asr, err := speech.NewASR(speech.ASRConfig{PoolSize: s.cfg.Server.MaxSessions + 4}, s.log.Named("asr"))
		if err != nil {
			return fmt.Errorf("loading ASR: %w", err)
		}
		s.onClose("asr", func(context.Context) error { asr.Close(); return nil })
		s.parts.ASR = asr
	}
	if pc.NeedsLocalTTS() {
		tts, err := speech.NewTTS(speech.TTSConfig{Voice: pc.Talker.Voice, OutputRate: pc.Talker.OutputRate})
		if err != nil {
			return fmt.Errorf("loading TTS voice %q: %w", pc.Talker.Voice, err)
		}
		s.onClose("tts", func(context.Context) error { tts.Close(); return nil })
		s.parts.TTS = tts
	}
	return nil
}

// buildPipeline starts the stage graph, the request client and the chat and audio handlers.
func (s *Server) buildPipeline(ctx context.Context) error {
	p, err := stage.New(s.pipelineCfg, stage.Deps{Engine: s.parts.Engine, ASR: s.parts.ASR, TTS: s.parts.TTS}, s.log)
	if err != nil {
		return err
	}
	s.onClose("pipeline", func(context.Context) error { p.Close(); return nil })
	s.parts.Pipeline = p

	id := s.names.ID()
	collectors := metrics.NewCollectors(s.reg, id)
	collectors.InitStages(p.NumStages())
	s.countPanic = collectors.CountPanic
	if eng := s.parts.Engine; eng != nil {
		eng.SetPanicCounter(collectors.CountPanic)
		collectors.SetEngineKV(func() metrics.EngineKV {
			st := eng.KVStats()
			return metrics.EngineKV{Cells: st.Cells, CellsHeld: st.CellsHeld, CellsReserved: st.WorstCaseHeld,
				Sequences: st.Sequences, FullEvents: st.FullEvents, RefusedSlots: st.RefusedSlots, RefusedKV: st.RefusedKV,
				DecodeErrors: st.DecodeErrors}
		})
		s.sessionLimit = s.kvSessionLimit(eng.KVStats())
		s.seqContext = eng.KVStats().SeqContext
	}
	collectors.SetStageLoad(func() []metrics.StageLoad {
		var out []metrics.StageLoad
		for _, l := range p.Load() {
			out = append(out, metrics.StageLoad{Stage: l.Stage, Running: l.Running, Waiting: l.Waiting})
		}
		return out
	})
	tr, err := tracing.New(ctx, tracing.Config{Endpoint: s.cfg.Server.OTLPEndpoint, Version: api.Version}, s.log.Named("tracing"))
	if err != nil {
		return err
	}
	s.tracer = tr
	var onFinal func(metrics.FinalizedRequest) string
	if tr != nil {
		// Closed after the realtime sessions (closers run in reverse): their last turns are
		// finalized, then flushed.
		s.onClose("tracing", tr.Shutdown)
		onFinal = tr.ObserveFinalized
	}
	s.parts.Client = requestclient.New(p, requestclient.Options{
		OnFinalized:     onFinal,
		LogStats:        s.cfg.Server.LogStats,
		StructuredStats: s.cfg.Server.LogFormat == "json",
		Collectors:      collectors,
		ModelName:       id,
	}, s.log)
	s.chat = api.NewChatHandler(api.ChatConfig{
		CountToolCall:    collectors.CountToolCall,
		CountEngineError: collectors.CountEngineError,
		Models:           s.models,
		AcceptModel:      s.acceptModel,
		MaxBodyBytes:     s.cfg.Server.MaxBodyBytes,
		MaxInFlight:      s.cfg.Server.MaxInFlight,
		Trace:            s.tracer.HTTPHook(),
	}, s.parts.Client, s.log)
	// /v1/audio/transcriptions and /v1/audio/speech run on the pipeline's ASR and TTS (local
	// or remote, as the pipeline config selects).
	audio := api.AudioConfig{MaxBodyBytes: s.cfg.Server.MaxBodyBytes}
	if p.SupportsDuplex() {
		s.transcribe = api.NewTranscriptionsHandler(audio, p, s.log)
	}
	if p.HasSpeech() {
		s.speech = api.NewSpeechHandler(audio, p, s.log)
	}
	return nil
}

// buildRealtime admits duplex sessions over the pipeline and mounts the WebSocket endpoint.
// Sessions close first at Close (closers run in reverse), each with session.closed
// {reason:"shutdown"} and its turn finalized, before the pipeline stops under them.
func (s *Server) buildRealtime(ctx context.Context) error {
	var backend session.Backend = session.NewPipelineBackend(s.parts.Client)
	if s.opts.WrapBackend != nil {
		backend = s.opts.WrapBackend(backend)
	}
	// pipeline.thinker.vad is the server_vad default of every realtime session.
	vad := s.pipelineCfg.Thinker.VAD
	mcpAllow, err := mcpclient.ParseAllowList(splitList(s.cfg.Realtime.MCPAllowedURLs))
	if err != nil {
		return fmt.Errorf("realtime.mcp_allowed_urls: %w", err)
	}
	mgr := session.NewManager(session.ManagerConfig{
		MCPAllowList:           mcpAllow,
		MaxSessions:            s.effectiveMaxSessions(),
		DrainGrace:             s.cfg.Server.EffectiveDrainGrace(),
		MaxIdleTimeout:         s.cfg.Server.MaxIdleTimeout,
		IdleTimeout:            s.cfg.EffectiveIdleTimeout(),
		TurnDetection:          &session.TurnDetection{TurnDetection: duplex.TurnDetection{Threshold: vad.Threshold, PrefixPaddingMs: vad.PrefixPaddingMs, SilenceDurationMs: vad.SilenceDurationMs}},
		ResumeGrace:            s.cfg.Realtime.ResumeGrace,
		MaxSessionLength:       s.cfg.Realtime.MaxSessionLength,
		Metrics:                s.parts.Client.Collectors(),
		LogStats:               s.cfg.Server.LogStats,
		StructuredStats:        s.cfg.Server.LogFormat == "json",
		ModelName:              s.names.ID(),
		AcceptModel:            s.acceptModel,
		ServedModels:           s.models,
		MaxInstructionsBytes:   s.cfg.Server.MaxInstructionsBytes,
		PrefillBudgetTokens:    s.cfg.Server.PrefillBudgetTokens,
		MaxInboxBytes:          s.cfg.Server.SessionInboxBytes,
		MaxHistoryBytes:        s.cfg.Server.SessionHistoryBytes,
		DefaultMaxOutputTokens: s.pipelineCfg.Thinker.MaxTokens,
	}, backend, s.log)
	s.onClose("realtime sessions", mgr.Shutdown)
	metrics.RegisterAdmission(s.reg, s.names.ID(), mgr.Active, s.effectiveMaxSessions())
	hcfg := realtime.HandlerConfig{
		APIKey:           s.cfg.Server.APIKey,
		BaseContext:      context.WithoutCancel(ctx),
		SendQueueBytes:   s.cfg.Server.SessionOutputBytes,
		JournalBytes:     s.cfg.Realtime.ResumeJournalBytes,
		JournalEvents:    s.cfg.Realtime.ResumeJournalEvents,
		HandshakeTimeout: s.cfg.Realtime.HandshakeTimeout,
		WriteTimeout:     s.cfg.Realtime.WriteTimeout,
		StallTimeout:     s.cfg.Realtime.StallTimeout,
		OnStall:          s.parts.Client.Collectors().CountStalledClient,
		MaxEventBytes:    s.cfg.Realtime.MaxEventBytes,
		SendQueue:        s.cfg.Realtime.SendQueueEvents,
		OriginPatterns:   splitList(s.cfg.Realtime.OriginPatterns),
		Secrets:          s.secrets,
		Trace:            s.tracer.SessionHook(),
		InvalidEvents:    metrics.NewInvalidEvents(s.reg, s.names.ID()),
		Live: live.Options{ContextTokens: s.seqContext, TestHooks: s.cfg.Realtime.LiveTestHooks,
			IdleTimeout: s.cfg.EffectiveIdleTimeout(), OutputLead: s.cfg.Realtime.LiveOutputLead},
	}
	s.clientSecrets = realtime.NewClientSecretsHandler(s.secrets, mgr, s.log)
	s.prunePeriodically()
	rtp := newRTPCollector()
	calls, err := realtime.NewCalls(realtime.CallsConfig{UDPPort: s.cfg.Realtime.WebRTCUDPPort, PublicIPs: splitList(s.cfg.Realtime.WebRTCPublicIPs),
		ICETCP: s.cfg.Realtime.WebRTCTCPPort > 0, TCPPort: s.cfg.Realtime.WebRTCTCPPort, Interfaces: splitList(s.cfg.Realtime.WebRTCInterfaces),
		OnCallEnd: rtp.ObserveCall}, hcfg, mgr, s.log)
	if err != nil {
		return err
	}
	// GET /v1/realtime?call_id=rtc_… is a call's sideband; without call_id, a WebSocket session.
	s.realtime = calls.WithSideband(realtime.NewHandler(hcfg, mgr, s.log))
	// Registered after the session manager, so closed before it: calls hang up first.
	s.onClose("webrtc calls", calls.Close)
	s.calls = calls
	rtp.setSource(calls)
	s.reg.MustRegister(rtp)
	s.log.Info("webrtc calls ready", zap.Int("udp_port", calls.Port()), zap.Int("ice_tcp_port", calls.TCPPort()))
	s.parts.Backend = backend
	s.parts.Sessions = mgr
	s.log.Info("realtime endpoint ready", zap.Int("max_sessions", s.effectiveMaxSessions()))
	return nil
}

// warmASR builds WarmDecoders ASR decoders in the background, so the first sessions after
// start-up find one ready instead of each waiting about a second for its own. Readiness does
// not wait for it: a session that comes first builds its decoder as before. The goroutine is
// the server's: Close cancels it and waits before the ASR closes.
func (s *Server) warmASR() {
	n := min(WarmDecoders, s.cfg.Server.MaxSessions+4)
	done := s.warmed
	asr := s.parts.ASR
	if asr == nil { // the ASR is remote
		close(done)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(done)
		start := time.Now()
		if err := asr.Warm(ctx, n); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("asr warm-up failed", zap.Error(err))
			}
			return
		}
		s.log.Info("asr warm-up done", zap.Int("decoders", asr.Decoders()), zap.Duration("took", time.Since(start)))
	}()
	s.onClose("asr warm-up", func(context.Context) error { cancel(); <-done; return nil })
}

// splitList splits a comma-separated setting, dropping blanks.
// setModelNames resolves the names the model is served under (server.served_model_name,
// server.model_aliases); /v1/models lists s.models.
func (s *Server) setModelNames() {
	s.names = newModelNames(s.cfg.Server.ServedModelName, s.cfg.Server.ModelAliases, ModelID(s.cfg.Engine.Model))
	s.models = s.names.Listed()
}

// acceptModel reports whether a chat request or realtime session may name the model so: a
// served name or alias, or the engine.model value itself, so that clients written against the
// path keep working.
func (s *Server) acceptModel(name string) bool {
	return s.names.Accepts(name) || (name != "" && name == s.cfg.Engine.Model)
}

func splitList(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// kvSessionLimit is how many realtime sessions the engine can hold at once. Every realtime
// session holds one engine sequence for its life, and every sequence reserves its whole window
// (seq_context cells) when it opens, so the engine holds min(engine.max_sequences,
// engine.context_size / seq_context) of them. Admission stops there (a new client gets 503
// up front) rather than letting a session in whose first turn would fail for want of a
// sequence or of KV cells.
func (s *Server) kvSessionLimit(kv gpu.KVStats) int {
	want := max(s.cfg.Server.MaxSessions, 1)
	fit := min(kv.MaxSequences, kv.Cells/max(kv.SeqContext, 1))
	if fit >= want {
		s.log.Info("KV cache plan fits", zap.Int("sessions", want), zap.Int("seq_context", kv.SeqContext),
			zap.Int("cells", kv.Cells), zap.Int("max_sequences", kv.MaxSequences))
		return want
	}
	limit := max(fit, 1)
	s.log.Warn("KV cache plan: admitting fewer realtime sessions than server.max_sessions",
		zap.Int("max_sessions", want), zap.Int("admitted", limit), zap.Int("seq_context", kv.SeqContext),
		zap.Int("cells", kv.Cells), zap.Int("max_sequences", kv.MaxSequences),
		zap.String("fix", "raise engine.context_size and engine.max_sequences, or lower engine.seq_context"))
	return limit
}

// effectiveMaxSessions is server.max_sessions, lowered to what the local engine's KV plan holds
// (kvSessionLimit); a server without a local engine (remote thinker) admits max_sessions.
func (s *Server) effectiveMaxSessions() int {
	if s.sessionLimit > 0 {
		return min(s.sessionLimit, s.cfg.Server.MaxSessions)
	}
	return s.cfg.Server.MaxSessions
}

// prunePeriodically drops expired client secrets every clientsecret.PruneInterval, so the
// sessions they hold come back without waiting for the store to fill; the loop is stopped and
// waited for at Close.
func (s *Server) prunePeriodically() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.secrets.Prune(ctx, clientsecret.PruneInterval, s.secretsMemoryReturner())
	}()
	s.onClose("client secrets pruner", func(ctx context.Context) error {
		cancel()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

// secretsMemoryReturner hands the memory of a large batch of expired client secrets back to
// the system at once. Left to the runtime, a server that minted 10,000 keys and then went quiet
// would keep them in RSS for minutes (nothing allocates, so nothing triggers a GC before the
// forced one every two minutes, and the scavenger returns pages slowly); the operator's
// dashboards would read that as a leak.
func (s *Server) secretsMemoryReturner() func(keys int, bytes int64) {
	var w expiryWave
	return func(keys int, bytes int64) {
		if !w.due(keys, bytes) {
			return
		}
		debug.FreeOSMemory()
		gpu.ReturnNativeMemory() // minting measured each session's instructions in native code
		s.log.Debug("client secrets expired", zap.Int("keys", keys), zap.Int64("bytes", bytes))
	}
}

// expiryWave decides when pruned client secrets are worth a forced GC: a thousand keys or a MiB
// of sessions, added up over passes. Keys minted over a few seconds expire across two prune
// passes and the second may be small, so the pass after one that returned memory returns the
// wave's tail too. The forced GC stays rare: once or twice per wave.
type expiryWave struct {
	keys  int
	bytes int64
	tail  bool // the last pass returned memory
}

const (
	waveKeys  = 1000
	waveBytes = 1 << 20
)

func (w *expiryWave) due(keys int, bytes int64) bool {
	w.keys += keys
	w.bytes += bytes
	large := w.keys >= waveKeys || w.bytes >= waveBytes
	if !large && !w.tail {
		return false
	}
	w.tail = large
	w.keys, w.bytes = 0, 0
	return true
}
