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
		Threads:      e.Threads, // 0: the engine's default, all cores but one
		ContextSize:  e.ContextSize,
		MaxSequences: e.MaxSequences,
		BatchSize:    e.BatchSize,
		PrefillChunk: e.PrefillChunk,
		SeqContext:   e.SeqContext,
		Overflow:     e.Overflow,
	}
}

// loadEngine loads the model, generating the dummy GGUF on first use; gpu.Load logs what it
// loaded and on which devices.
func loadEngine(ctx context.Context, e config.Engine, log *zap.Logger) (*gpu.Runner, error) {
	r, err := gpu.Load(ctx, gpuConfig(e), log)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// engineBackends lists the engine backends compiled into this binary. internal/gpu reports
// backends only for a loaded model (CUDA is a library found at run time, not compiled in),
// so the binary itself carries the CPU backend alone.
func engineBackends() []string { return []string{"cpu"} }
