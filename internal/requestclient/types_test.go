package requestclient

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/stage"
)

// The converters must carry every field: a field added on one side and not the other shows up
// here as a difference from the expected value.

func TestDuplexOptionsToStage(t *testing.T) {
	t.Parallel()
	base := gpu.Sampling{Temperature: 0.8, TopP: 0.95, TopK: 20, RandomSeed: true}
	temp, seed := 0.25, uint32(42)
	tests := []struct {
		name string
		in   DuplexOptions
		want stage.DuplexOptions
	}{
		{"the pipeline's sampling", DuplexOptions{Instructions: "hi", AutoResponse: true, WantAudio: true, MaxTokens: 9,
			MaxHistoryBytes: 1000, VADThreshold: 0.9, PrefixPaddingMs: 300, SilenceDurationMs: 500,
			TurnType: TurnSemanticVAD, Eagerness: "low"},
			stage.DuplexOptions{RequestID: "rid", Instructions: "hi", AutoResponse: true, WantAudio: true, MaxTokens: 9,
				MaxHistoryBytes: 1000, Sampling: base, TurnType: stage.TurnSemanticVAD, Eagerness: "low"}},
		{"temperature and seed override it", DuplexOptions{Temperature: &temp, Seed: &seed},
			stage.DuplexOptions{RequestID: "rid", Sampling: gpu.Sampling{Temperature: 0.25, TopP: 0.95, TopK: 20, Seed: 42}}},
	}
	tests[0].want.VAD.Threshold, tests[0].want.VAD.PrefixPaddingMs, tests[0].want.VAD.SilenceDurationMs = 0.9, 300, 500
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.in.toStage("rid", base))
		})
	}
}

func TestResponseSpecToStage(t *testing.T) {
	t.Parallel()
	ins := "short"
	in := ResponseSpec{MaxTokens: 5, Instructions: &ins, OutOfBand: true, Input: []Message{{Role: "user", Text: "q"}}}
	want := stage.ResponseSpec{MaxTokens: 5, Instructions: &ins, OutOfBand: true, Input: []gpu.ChatMessage{{Role: "user", Content: "q"}}}
	require.Equal(t, want, in.toStage())
	require.Nil(t, ResponseSpec{}.toStage().Input, "nil input keeps the conversation")
	require.NotNil(t, ResponseSpec{Input: []Message{}}.toStage().Input, "empty input replaces it")
}

func TestOutputFromStage(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		in   stage.OutputMessage
		want Output
	}{
		{stage.OutputMessage{Kind: stage.Decision, Turn: 2, Decision: stage.DecisionSpeak}, Output{Kind: OutDecision, Turn: 2, Decision: DecisionSpeak}},
		{stage.OutputMessage{Kind: stage.Decision, Turn: 3, Decision: stage.DecisionSpeak,
			EndOfTurn: &stage.EndOfTurnDecision{Reason: stage.EndOfTurnSemantic, Prob: 0.7, Scored: true, SilenceMs: 300}},
			Output{Kind: OutDecision, Turn: 3, Decision: DecisionSpeak,
				EndOfTurn: &EndOfTurnDecision{Reason: EndOfTurnSemantic, Prob: 0.7, Scored: true, SilenceMs: 300}}},
		{stage.OutputMessage{Kind: stage.Transcript, Turn: 1, Text: "hello"}, Output{Kind: OutTranscript, Turn: 1, Text: "hello"}},
		{stage.OutputMessage{Kind: stage.Text, Turn: 1, Text: "hi", Tokens: 2}, Output{Kind: OutText, Turn: 1, Text: "hi", Tokens: 2}},
		{stage.OutputMessage{Kind: stage.Audio, Turn: 1, Text: "hi", Audio: []float32{1}, SampleRate: 24000},
			Output{Kind: OutAudio, Turn: 1, Text: "hi", Audio: []float32{1}, SampleRate: 24000}},
		{stage.OutputMessage{Kind: stage.Finished, Turn: 1, Finished: true, FinishReason: "length"}, Output{Kind: OutFinished, Turn: 1, FinishReason: "length"}},
		{stage.OutputMessage{Kind: stage.Error, Turn: 1, Err: boom}, Output{Kind: OutError, Turn: 1, Err: boom}},
		{stage.OutputMessage{Kind: stage.Usage, Turn: 1, Usage: &stage.TokenUsage{InputTokens: 30, CachedTokens: 20, OutputTokens: 5, Final: true}},
			Output{Kind: OutUsage, Turn: 1, Usage: &Usage{InputTokens: 30, CachedTokens: 20, OutputTokens: 5, Final: true}}},
		// An unknown kind is an error that names itself, never a bare "engine error".
		{stage.OutputMessage{Kind: stage.OutputKind(99), Turn: 1}, Output{Kind: OutError, Turn: 1, Err: errors.New("stage output of unknown kind OutputKind(99)")}},
	}
	for _, tt := range tests {
		t.Run(tt.in.Kind.String(), func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, outputFromStage(tt.in))
		})
	}
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
