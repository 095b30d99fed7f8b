package session

import (
	"context"
	"errors"

	"github.com/omniserve/omniserve/internal/duplex"
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
func (b *PipelineBackend) Open(ctx context.Context, f requestclient.Fence, opts duplex.Options, out func(duplex.Output)) (Engine, error) {
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
	_ turnStatsMarker         = pipelineEngine{}
	_ toolEngine              = pipelineEngine{}
	_ transcriptLogprobSetter = pipelineEngine{}

	_ transcriptLogprobBackend = (*PipelineBackend)(nil)
)

// pipelineEngine is the session's Engine over the stage pipeline: *requestclient.DuplexRequest
// has every method the session calls, with the session's signatures, so the engine's calls go
// straight to it.
type pipelineEngine struct{ *requestclient.DuplexRequest }
