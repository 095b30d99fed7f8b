package requestclient

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/stage"
)

// The session's options and the stage's outputs pass as they are: the stream's options are the
// session's, with only the request id and the sampling added; an output reaches the session
// exactly as the stage produced it.

func TestStreamOptions(t *testing.T) {
	t.Parallel()
	base := gpu.Sampling{Temperature: 0.8, TopP: 0.95, TopK: 20, RandomSeed: true}
	temp, seed := 0.25, uint32(42)
	full := duplex.Options{Instructions: "hi", AutoResponse: true, WantAudio: true, MaxTokens: 9, MaxHistoryBytes: 1000,
		Turn: duplex.TurnDetection{Type: duplex.TurnSemanticVAD, Threshold: 0.9, PrefixPaddingMs: 300, SilenceDurationMs: 500, Eagerness: "low"}}
	over := duplex.Options{Temperature: &temp, Seed: &seed}
	tests := []struct {
		name string
		in   duplex.Options
		want stage.DuplexOptions
	}{
		{"the pipeline's sampling", full, stage.DuplexOptions{Options: full, RequestID: "rid", Sampling: base}},
		{"temperature and seed override it", over,
			stage.DuplexOptions{Options: over, RequestID: "rid", Sampling: gpu.Sampling{Temperature: 0.25, TopP: 0.95, TopK: 20, Seed: 42}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, streamOptions(tt.in, "rid", base))
		})
	}
}

func TestOutputPassesAsIs(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	outs := []duplex.Output{
		{Kind: duplex.OutDecision, Turn: 3, Decision: duplex.DecisionSpeak,
			EndOfTurn: &duplex.EndOfTurnDecision{Reason: duplex.EndOfTurnSemantic, Prob: 0.7, Scored: true, SilenceMs: 300}},
		{Kind: duplex.OutTranscript, Turn: 1, Text: "hello"},
		{Kind: duplex.OutText, Turn: 1, Text: "hi", Tokens: 2},
		{Kind: duplex.OutAudio, Turn: 1, Text: "hi", Audio: []float32{1}, SampleRate: 24000},
		{Kind: duplex.OutFinished, Turn: 1, FinishReason: "length"},
		{Kind: duplex.OutError, Turn: 1, Err: boom},
		{Kind: duplex.OutUsage, Turn: 1, Usage: &duplex.Usage{InputTokens: 30, CachedTokens: 20, OutputTokens: 5, Final: true}},
	}
	var got []duplex.Output
	d := New(nil, Options{}, nil).newDuplex(Fence{SessionID: "s"}, "", 2, func(o duplex.Output) { got = append(got, o) })
	for _, o := range outs {
		d.OnOutput(stage.OutputMessage{Output: o, StageID: 1, Finished: o.Kind == duplex.OutFinished})
	}
	require.Equal(t, outs, got)
}

func TestErrorsOf(t *testing.T) {
	t.Parallel()
	cle := fmt.Errorf("submitting: %w", &stage.ContextLengthError{PromptTokens: 10, CompletionTokens: 5, Limit: 12})
	require.ErrorIs(t, cle, ErrContextLength)
	got, ok := ContextLengthErrorOf(cle)
	require.True(t, ok)
	require.Equal(t, &ContextLengthError{PromptTokens: 10, CompletionTokens: 5, Limit: 12,
		Message: (&stage.ContextLengthError{PromptTokens: 10, CompletionTokens: 5, Limit: 12}).Error()}, got)

	ue := fmt.Errorf("chat: %w", &stage.UpstreamError{Stage: "thinker", URL: "http://x", Status: 429, Type: "rate_limit_error",
		Code: "slow_down", Param: "model", Message: "busy", RetryAfter: 3})
	up, ok := UpstreamErrorOf(ue)
	require.True(t, ok)
	require.Equal(t, &UpstreamError{Status: 429, Type: "rate_limit_error", Code: "slow_down", Param: "model",
		Message: "remote thinker (upstream status 429): busy", RetryAfter: 3}, up)

	se := fmt.Errorf("submit: %w", &gpu.SamplingError{Param: "logit_bias", Detail: "token id 9 is outside"})
	sp, ok := SamplingErrorOf(se)
	require.True(t, ok)
	require.Equal(t, &SamplingError{Param: "logit_bias", Message: "engine: invalid logit_bias: token id 9 is outside"}, sp)

	for _, f := range []func(error) bool{
		func(err error) bool { _, ok := ContextLengthErrorOf(err); return ok },
		func(err error) bool { _, ok := UpstreamErrorOf(err); return ok },
		func(err error) bool { _, ok := SamplingErrorOf(err); return ok },
	} {
		require.False(t, f(errors.New("other")))
		require.False(t, f(nil))
	}
	require.ErrorIs(t, fmt.Errorf("x: %w", stage.ErrQueueFull), ErrQueueFull)
	require.ErrorIs(t, fmt.Errorf("x: %w", gpu.ErrNoFreeSlot), ErrNoFreeSlot)
	require.ErrorIs(t, fmt.Errorf("x: %w", stage.ErrInvalidRequest), ErrInvalidRequest)
}
