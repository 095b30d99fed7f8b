package main

import (
	"context"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/config"
	"github.com/omniserve/omniserve/internal/gpu"
)

// gpuConfig maps the engine settings onto internal/gpu's; zero sizes keep the engine defaults.
func gpuConfig(e config.Engine) gpu.Config {
	return gpu.Config{
		Model:        e.Model,
		CacheDir:     e.CacheDir,
		Device:       e.Device,
		GPULayers:    e.GPULayers,
		Threads:      e.Threads,
		ContextSize:  e.ContextSize,
		MaxSequences: e.MaxSequences,
		BatchSize:    e.BatchSize,
		PrefillChunk: e.PrefillChunk,
		SeqContext:   e.SeqContext,
		Overflow:     e.Overflow,
	}
}

// loadEngine loads the model (generating the dummy GGUF on first use) and logs what it runs on.
func loadEngine(ctx context.Context, e config.Engine, log *zap.Logger) (*gpu.Runner, error) {
	r, err := gpu.Load(ctx, gpuConfig(e), log)
	if err != nil {
		return nil, err
	}
	info := r.Info()
	log.Info("model loaded", zap.String("name", info.Name), zap.String("path", info.Path),
		zap.String("arch", info.Arch), zap.Int("vocab", info.VocabSize), zap.Int("context", info.ContextSize),
		zap.Strings("backends", info.Backends), zap.Strings("devices", info.Devices), zap.Int("gpu_layers", info.GPULayers))
	return r, nil
}

// engineBackends lists the engine backends compiled into this binary. internal/gpu reports
// backends only for a loaded model (CUDA is a library found at run time, not compiled in),
// so the binary itself carries the CPU backend alone.
func engineBackends() []string { return []string{"cpu"} }
