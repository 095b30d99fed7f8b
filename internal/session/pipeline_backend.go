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

// SupportsTranscriptLogprobs implements transcriptLogprobBackend: only the local recognizer
// gives word logprobs.
func (b *PipelineBackend) SupportsTranscriptLogprobs() bool {
	return b.client.SupportsTranscriptLogprobs()
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
		TurnType:          o.TurnType,
		Eagerness:         o.Eagerness,

		TranscriptLogprobs: o.TranscriptLogprobs,
		TranscribeOnly:     o.TranscribeOnly,
	}
	d, err := b.client.OpenDuplex(ctx, f, opts, out)
	if err != nil {
		if errors.Is(err, requestclient.ErrQueueFull) {
			return nil, errors.Join(errCapacity, err)
		}
		return nil, err
	}
	return pipelineEngine{d}, nil
}

// The pipeline's engine has every optional capability the session looks for with a type
// assertion; these checks keep a changed signature from silently dropping one.
var (
	_ AudioDiscarder          = pipelineEngine{}
	_ TurnCanceller           = pipelineEngine{}
	_ unstartedTurnFinalizer  = pipelineEngine{}
	_ turnStatsMarker         = pipelineEngine{}
	_ turnDetachMarker        = pipelineEngine{}
	_ turnPlaybackMarker      = pipelineEngine{}
	_ turnToolMarker          = pipelineEngine{}
	_ toolEngine              = pipelineEngine{}
	_ transcriptLogprobSetter = pipelineEngine{}

	_ transcriptLogprobBackend = (*PipelineBackend)(nil)
)

// pipelineEngine adapts *requestclient.DuplexRequest to Engine.
type pipelineEngine struct{ d *requestclient.DuplexRequest }

func (e pipelineEngine) AppendAudio(ctx context.Context, turn int, pcm []float32) error {
	return e.d.AppendAudio(ctx, turn, pcm)
}
func (e pipelineEngine) Commit(ctx context.Context, turn int, respond bool) (requestclient.Transcription, error) {
	return e.d.Commit(ctx, turn, respond)
}

// SetTranscriptLogprobs implements transcriptLogprobSetter.
func (e pipelineEngine) SetTranscriptLogprobs(ctx context.Context, on bool) error {
	return e.d.SetTranscriptLogprobs(ctx, on)
}

// CancelTurn implements TurnCanceller.
func (e pipelineEngine) CancelTurn(turn int) { e.d.CancelTurn(turn) }

func (e pipelineEngine) DiscardAudio(ctx context.Context) error {
	return e.d.DiscardAudio(ctx)
}
func (e pipelineEngine) AppendText(ctx context.Context, turn int, role, text string) error {
	return e.d.AppendText(ctx, turn, role, text)
}
func (e pipelineEngine) Respond(ctx context.Context, turn, maxTokens int) (int, error) {
	return e.d.Respond(ctx, turn, maxTokens)
}
func (e pipelineEngine) Signal(ctx context.Context, event string, next requestclient.Fence) error {
	return e.d.Signal(ctx, event, next)
}
func (e pipelineEngine) Close(ctx context.Context, reason string) error {
	return e.d.Close(ctx, reason)
}
func (e pipelineEngine) Abort() { e.d.Abort() }
func (e pipelineEngine) MarkTurnArrival(turn int, ts float64) float64 {
	return e.d.MarkTurnArrival(turn, ts)
}
func (e pipelineEngine) BeginTurn(turn int, responseID string, turnID int, arrival float64) {
	e.d.BeginTurn(turn, responseID, turnID, arrival)
}
func (e pipelineEngine) FinalizeTurn(turn int, reason string) bool {
	return e.d.FinalizeTurn(turn, reason)
}

// FinalizeUnstartedTurn and SettleInput implement unstartedTurnFinalizer.
func (e pipelineEngine) FinalizeUnstartedTurn(turn int, reason string) bool {
	return e.d.FinalizeUnstartedTurn(turn, reason)
}
func (e pipelineEngine) SettleInput(ctx context.Context, turn int) error {
	return e.d.SettleInput(ctx, turn)
}

func (e pipelineEngine) MarkInputEnd(turn int, ts float64) { e.d.MarkInputEnd(turn, ts) }
func (e pipelineEngine) ClearTurnInput(turn int)           { e.d.ClearTurnInput(turn) }
func (e pipelineEngine) SetTurnDelivered(turn int, audioMs, underrunMs float64) {
	e.d.SetTurnDelivered(turn, audioMs, underrunMs)
}
func (e pipelineEngine) SetTurnDetached(turn int, ms float64) { e.d.SetTurnDetached(turn, ms) }
func (e pipelineEngine) SetTurnPlayed(turn int, ms float64)   { e.d.SetTurnPlayed(turn, ms) }

// Unclosed reports turns recorded without the session closing them (tests check for none).
func (e pipelineEngine) Unclosed() []int                 { return e.d.Unclosed() }
func (e pipelineEngine) ObserveBargeIn(latencyS float64) { e.d.ObserveBargeIn(latencyS) }

// AddTurnToolCalls implements turnToolMarker.
func (e pipelineEngine) AddTurnToolCalls(turn int, calls []metrics.ToolCallStats) {
	e.d.AddTurnToolCalls(turn, calls)
}
