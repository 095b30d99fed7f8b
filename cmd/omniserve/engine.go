package main

import (
	"context"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/config"
)

// engine is the loaded model runner, as serve sees it.
type engine struct {
	name     string   // the id /v1/models lists
	backends []string // compute backends available in this process
	close    func() error
}

// loadEngine loads the model. TEMPORARY: internal/gpu has not landed yet; this placeholder
// loads nothing and is replaced by gpu.Load as soon as it compiles.
func loadEngine(_ context.Context, cfg config.Engine, log *zap.Logger) (*engine, error) {
	log.Warn("engine: internal/gpu is not wired yet; no model loaded", zap.String("model", cfg.Model))
	return &engine{name: cfg.Model, backends: engineBackends(), close: func() error { return nil }}, nil
}

// engineBackends lists the engine backends compiled into this binary.
func engineBackends() []string { return []string{"cpu"} }
