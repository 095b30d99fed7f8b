package session

import (
	"context"
	"errors"

	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// PipelineBackend is the production Backend: one requestclient.DuplexRequest per session over the
// stage pipeline.
type PipelineBackend struct {
	client *requestclient.Client
}

// NewPipelineBackend returns a Backend over c.
func NewPipelineBackend(c *requestclient.Client) *PipelineBackend {
	return &PipelineBackend{client: c}
}

// SupportsDuplex implements Backend.
func (b *PipelineBackend) SupportsDuplex() bool { return b.client.SupportsDuplex() }

// Open implements Backend.
func (b *PipelineBackend) Open(ctx context.Context, f requestclient.Fence, o OpenOptions, out func(requestclient.Output)) (Engine, error) {
	opts := requestclient.DuplexOptions{
		Instructions:      o.Instructions,
		AutoResponse:      o.AutoResponse,
		WantAudio:         o.WantAudio,
		MaxTokens:         o.MaxTokens,
		MaxHistoryBytes:   o.MaxHistoryBytes,
		VADThreshold:      o.VADThreshold,
		PrefixPaddingMs:   o.PrefixPaddingMs,
		SilenceDurationMs: o.SilenceDurationMs,
		Temperature:       o.Temperature, // nil: pipeline.thinker.sampling's
		Seed:              o.Seed,        // nil: a fresh random seed per response unless configured
		TranscriptDeltas:  o.TranscriptDeltas,
	}
	d, err := b.client.OpenDuplex(ctx, f, opts, out)
	if err != nil {
		if errors.Is(err, requestclient.ErrQueueFull) {
			return nil, errors.Join(ErrCapacity, err)
		}
		return nil, err
	}
	return pipelineEngine{d}, nil
}

// pipelineEngine adapts *requestclient.DuplexRequest to Engine.
type pipelineEngine struct{ d *requestclient.DuplexRequest }

func (e pipelineEngine) AppendAudio(ctx context.Context, pcm []float32) error {
	return e.d.AppendAudio(ctx, pcm)
}
func (e pipelineEngine) Commit(ctx context.Context, respond bool) (string, error) {
	return e.d.Commit(ctx, respond)
}

// CancelTurn implements TurnCanceller.
func (e pipelineEngine) CancelTurn(turn int) { e.d.CancelTurn(turn) }

func (e pipelineEngine) DiscardAudio(ctx context.Context) error {
	return e.d.DiscardAudio(ctx)
}
func (e pipelineEngine) AppendText(ctx context.Context, role, text string) error {
	return e.d.AppendText(ctx, role, text)
}
func (e pipelineEngine) Respond(ctx context.Context, maxTokens int) (int, error) {
	return e.d.Respond(ctx, maxTokens)
}
func (e pipelineEngine) Signal(ctx context.Context, event string, next requestclient.Fence) error {
	return e.d.Signal(ctx, event, next)
}
func (e pipelineEngine) Close(ctx context.Context, reason string) error {
	return e.d.Close(ctx, reason)
}
func (e pipelineEngine) Abort()                             { e.d.Abort() }
func (e pipelineEngine) MarkTurnArrival(ts float64) float64 { return e.d.MarkTurnArrival(ts) }
func (e pipelineEngine) BeginTurn(responseID string, turnID int, arrival float64) {
	e.d.BeginTurn(responseID, turnID, arrival)
}
func (e pipelineEngine) FinalizeTurn(reason string) bool { return e.d.FinalizeTurn(reason) }

// FinalizeUnstartedTurn and SettleInput implement UnstartedTurnFinalizer.
func (e pipelineEngine) FinalizeUnstartedTurn(reason string) bool {
	return e.d.FinalizeUnstartedTurn(reason)
}
func (e pipelineEngine) SettleInput(ctx context.Context) error { return e.d.SettleInput(ctx) }

func (e pipelineEngine) MarkInputEnd(ts float64) { e.d.MarkInputEnd(ts) }
func (e pipelineEngine) ClearTurnInput()         { e.d.ClearTurnInput() }
func (e pipelineEngine) SetTurnDelivered(audioMs, underrunMs float64) {
	e.d.SetTurnDelivered(audioMs, underrunMs)
}
func (e pipelineEngine) SetTurnDetached(ms float64) { e.d.SetTurnDetached(ms) }

// AddTurnToolCalls implements TurnToolMarker.
func (e pipelineEngine) AddTurnToolCalls(calls []metrics.ToolCallStats) { e.d.AddTurnToolCalls(calls) }
func (e pipelineEngine) SetTurnPlayed(ms float64)                       { e.d.SetTurnPlayed(ms) }
func (e pipelineEngine) ObserveBargeIn(latencyS float64)                { e.d.ObserveBargeIn(latencyS) }
