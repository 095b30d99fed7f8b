package main

import (
	"context"
	"runtime"

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
		Threads:      engineThreads(e.Threads, runtime.NumCPU()),
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

// engineThreads resolves 0 to all cores but one: ggml's CPU threads spin on barriers, so an
// engine holding every core stalls whenever the pipeline's ASR, VAD or TTS runs (measured: the
// first-audio p50 fell from 127 ms to 36 ms with one engine thread on 2 busy cores).
func engineThreads(configured, cpus int) int {
	if configured > 0 {
		return configured
	}
	return max(1, cpus-1)
}
