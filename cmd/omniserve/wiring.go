package main

import (
	"context"
	"fmt"
	"slices"

	"go.uber.org/zap"
	"gopkg.in/yaml.v3"

	"github.com/omniserve/omniserve/internal/api"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/requestclient"
	"github.com/omniserve/omniserve/internal/session"
	"github.com/omniserve/omniserve/internal/speech"
	"github.com/omniserve/omniserve/internal/stage"
)

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
func (c *components) buildSpeech(context.Context) error {
	pc, err := pipelineConfig(c.cfg.Pipeline)
	if err != nil {
		return err
	}
	c.pipelineCfg = pc
	if pc.NeedsLocalASR() {
		// One decoder per live duplex session plus a few for chat input_audio; the pool grows
		// lazily, so an idle server holds one decoder, not MaxSessions of them (~95 MiB each).
		asr, err := speech.NewASR(speech.ASRConfig{PoolSize: c.cfg.Server.MaxSessions + 4}, c.log.Named("asr"))
		if err != nil {
			return fmt.Errorf("loading ASR: %w", err)
		}
		c.onClose("asr", func(context.Context) error { asr.Close(); return nil })
		c.asr = asr
	}
	if pc.NeedsLocalTTS() {
		tts, err := speech.NewTTS(speech.TTSConfig{Voice: pc.Talker.Voice, OutputRate: pc.Talker.OutputRate})
		if err != nil {
			return fmt.Errorf("loading TTS voice %q: %w", pc.Talker.Voice, err)
		}
		c.onClose("tts", func(context.Context) error { tts.Close(); return nil })
		c.tts = tts
	}
	return nil
}

// buildPipeline starts the stage graph, the request client and the chat handler.
func (c *components) buildPipeline(context.Context) error {
	p, err := stage.New(c.pipelineCfg, stage.Deps{Engine: c.engine, ASR: c.asr, TTS: c.tts}, c.log)
	if err != nil {
		return err
	}
	c.onClose("pipeline", func(context.Context) error { p.Close(); return nil })
	c.pipeline = p

	id := modelID(c.cfg.Engine.Model)
	collectors := metrics.NewCollectors(c.reg, id)
	collectors.InitStages(p.NumStages())
	collectors.SetStageLoad(func() []metrics.StageLoad {
		var out []metrics.StageLoad
		for _, l := range p.Load() {
			out = append(out, metrics.StageLoad{Stage: l.Stage, Running: l.Running, Waiting: l.Waiting})
		}
		return out
	})
	c.client = requestclient.New(p, requestclient.Options{
		LogStats:        c.cfg.Server.LogStats,
		StructuredStats: c.cfg.Server.LogFormat == "json",
		Collectors:      collectors,
		ModelName:       id,
	}, c.log)
	// The --model value itself stays accepted, so clients written against the path keep working.
	accepted := c.models
	if c.cfg.Engine.Model != id {
		accepted = append(slices.Clone(c.models), c.cfg.Engine.Model)
	}
	c.chat = api.NewChatHandler(api.ChatConfig{
		Models:       accepted,
		MaxBodyBytes: c.cfg.Server.MaxBodyBytes,
	}, c.client, c.log)
	c.buildAudio(p)
	return nil
}

// buildRealtime admits duplex sessions over the pipeline and mounts the WebSocket endpoint.
// Sessions close first at shutdown (closers run in reverse), each with session.closed
// {reason:"shutdown"} and its turn finalized, before the pipeline stops under them.
func (c *components) buildRealtime(ctx context.Context) error {
	mgr := session.NewManager(session.ManagerConfig{
		MaxSessions:    c.cfg.Server.MaxSessions,
		DrainGrace:     c.cfg.Server.EffectiveDrainGrace(),
		MaxIdleTimeout: c.cfg.Server.MaxIdleTimeout,
		ModelName:      modelID(c.cfg.Engine.Model),
	}, session.NewPipelineBackend(c.client, c.pipeline), c.log)
	c.onClose("realtime sessions", mgr.Shutdown)
	c.realtime = realtime.NewHandler(realtime.HandlerConfig{
		APIKey:      c.cfg.Server.APIKey,
		BaseContext: context.WithoutCancel(ctx),
	}, mgr, c.log)
	c.sessions = mgr
	c.log.Info("realtime endpoint ready", zap.Int("max_sessions", c.cfg.Server.MaxSessions))
	return nil
}
