package requestclient

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/stage"
)

// Every engine failure is counted under the condition that caused it (issue 27): each lower
// layer's sentinel, wrapped as the pipeline wraps it, names its cause; an error chain with two
// sentinels gets the one that says more.
func TestErrorCause(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		err   error
		cause string
	}{
		{"nil", nil, metrics.CauseUnknown},
		{"plain", errors.New("boom"), metrics.CauseUnknown},
		{"context length", fmt.Errorf("responding: %w", stage.ErrContextLength), metrics.CauseContextLength},
		{"kv cache full", fmt.Errorf("generating: generate: %w: shared KV cache (8192 cells) is full", gpu.ErrContextFull), metrics.CauseContextFull},
		{"decode", fmt.Errorf("prefilling conversation: append: %w: %w", gpu.ErrDecode, errors.New("llama_decode failed with code -1")), metrics.CauseDecodeFailed},
		{"panic", fmt.Errorf("generating: generate: %w: index out of range", gpu.ErrPanic), metrics.CauseEnginePanic},
		{"no logits", fmt.Errorf("generating: generate: %w", gpu.ErrNoLogits), metrics.CauseSampler},
		{"grammar", fmt.Errorf("generating: generate: %w", gpu.ErrGrammarStuck), metrics.CauseSampler},
		{"busy", fmt.Errorf("prefilling conversation: append: %w", gpu.ErrBusy), metrics.CauseSequenceBusy},
		{"empty history", fmt.Errorf("generating: generate: %w", gpu.ErrEmptyHistory), metrics.CauseEmptyHistory},
		{"invalid token", fmt.Errorf("append: %w: token 9 outside vocabulary of 8", gpu.ErrInvalidToken), metrics.CauseInvalidToken},
		{"template", fmt.Errorf("rendering conversation: %w: %w", stage.ErrTemplate, errors.New("bad role")), metrics.CauseTemplate},
		{"synthesis", fmt.Errorf("synthesizing phrase: %w: flite returned no wave", stage.ErrSynthesis), metrics.CauseSynthesis},
		{"synthesis cut by a cancel", fmt.Errorf("synthesizing phrase: %w: waiting for flite: %w", stage.ErrSynthesis, context.Canceled), metrics.CauseCancelled},
		{"queue full", fmt.Errorf("admitting to stage talker: %w", stage.ErrQueueFull), metrics.CauseOverloaded},
		{"no slot", fmt.Errorf("open: %w", gpu.ErrKVReserved), metrics.CauseOverloaded},
		{"engine closed", fmt.Errorf("generate: %w", gpu.ErrClosed), metrics.CauseClosed},
		{"stream closed", fmt.Errorf("starting response: %w", stage.ErrClosed), metrics.CauseClosed},
		{"deadline", fmt.Errorf("waiting: %w", context.DeadlineExceeded), metrics.CauseCancelled},
		{"invalid request", fmt.Errorf("%w: no messages", stage.ErrInvalidRequest), metrics.CauseInvalidRequest},
		{"upstream", fmt.Errorf("generating: %w", &stage.UpstreamError{Stage: "thinker", Message: "upstream 500"}), metrics.CauseUpstream},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.cause, ErrorCause(tt.err))
			require.Contains(t, metrics.EngineErrorCauses, tt.cause)
		})
	}
}
