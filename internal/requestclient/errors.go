package requestclient

import (
	"context"
	"errors"

	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/stage"
)

// Errors the layers above test with errors.Is. Each is the lower layer's own sentinel value,
// named here so that callers need not import stage or engine: errors from this package wrap
// the originals, so errors.Is(err, ErrQueueFull) holds exactly when the stage refused.
var (
	// ErrQueueFull: a stage's workers and queue are all taken (the engine is overloaded).
	ErrQueueFull = stage.ErrQueueFull
	// ErrNoFreeSlot: the engine has no free sequence slot (the engine is overloaded).
	ErrNoFreeSlot = gpu.ErrNoFreeSlot
	// ErrInvalidRequest: a malformed request (no messages, an unknown role), or a pipeline
	// without the part the request needs.
	ErrInvalidRequest = stage.ErrInvalidRequest
	// ErrContextLength: a prompt that does not fit the model's context window;
	// ContextLengthErrorOf has the figures.
	ErrContextLength = stage.ErrContextLength
	// ErrKVCacheFull: the engine's shared KV cache was full and this sequence, the longest,
	// gave way (engine.overflow "error"; "truncate" shortens it instead). A capacity condition:
	// engine.context_size is smaller than the sequences it serves need
	// (omniserve_engine_kv_cache_full_total counts it).
	ErrKVCacheFull = gpu.ErrContextFull
	// ErrInputTooLong: a duplex input refused by its size alone, before it was tokenized
	// (Client.MeasureInput); InputTooLongErrorOf has the figures.
	ErrInputTooLong = stage.ErrInputTooLong
)

// InputTooLongError is the figures of an ErrInputTooLong refusal: the input's bytes and the
// most the model's context window can hold.
type InputTooLongError struct {
	Bytes, Limit int
}

func (e *InputTooLongError) Error() string {
	return (&stage.InputTooLongError{Bytes: e.Bytes, Limit: e.Limit}).Error()
}

// InputTooLongErrorOf finds a refusal by size in err's chain.
func InputTooLongErrorOf(err error) (*InputTooLongError, bool) {
	var e *stage.InputTooLongError
	if !errors.As(err, &e) {
		return nil, false
	}
	return &InputTooLongError{Bytes: e.Bytes, Limit: e.Limit}, true
}

// ContextLengthError is the figures of an ErrContextLength failure. PromptTokens is 0 when the
// prompt was refused by its size alone; Message is OpenAI's wording of the failure.
type ContextLengthError struct {
	PromptTokens, CompletionTokens, Limit int
	Message                               string
}

func (e *ContextLengthError) Error() string { return e.Message }

// ContextLengthErrorOf finds a context-length failure in err's chain.
func ContextLengthErrorOf(err error) (*ContextLengthError, bool) {
	var cle *stage.ContextLengthError
	if !errors.As(err, &cle) {
		return nil, false
	}
	return &ContextLengthError{PromptTokens: cle.PromptTokens, CompletionTokens: cle.CompletionTokens,
		Limit: cle.Limit, Message: cle.Error()}, true
}

// UpstreamError is what the front's own client is told of a failure answered by (or on the way
// to) a remote stage's backend: the upstream's status, type, code and param when they pass
// through, 502 / 504 otherwise (docs/DEPLOY.md, "Upstream errors"). Message names the stage and
// the upstream status but not the upstream's URL.
type UpstreamError struct {
	Status                     int
	Type, Code, Param, Message string
	RetryAfter                 int // seconds (0 when the upstream sent none)
}

func (e *UpstreamError) Error() string { return e.Message }

// UpstreamErrorOf finds a remote stage's failure in err's chain.
func UpstreamErrorOf(err error) (*UpstreamError, bool) {
	var ue *stage.UpstreamError
	if !errors.As(err, &ue) {
		return nil, false
	}
	return &UpstreamError{Status: ue.ClientStatus(), Type: ue.ClientType(), Code: ue.ClientCode(),
		Param: ue.ClientParam(), Message: ue.ClientMessage(), RetryAfter: ue.RetryAfter}, true
}

// SamplingError is a sampling parameter the engine cannot honour: Param names it in OpenAI's
// spelling (logit_bias, presence_penalty, response_format, ...).
type SamplingError struct {
	Param, Message string
}

func (e *SamplingError) Error() string { return e.Message }

// SamplingErrorOf finds a refused sampling parameter in err's chain.
func SamplingErrorOf(err error) (*SamplingError, bool) {
	var se *gpu.SamplingError
	if !errors.As(err, &se) {
		return nil, false
	}
	return &SamplingError{Param: se.Param, Message: se.Error()}, true
}

// causes maps the lower layers' sentinels to the cause an engine failure is counted and logged
// under (metrics.EngineErrorCauses), in the order they are looked for: an error's chain may hold
// more than one (a synthesis cut by a cancel is a cancel; a decode failure under a prefill is a
// decode failure).
var causes = []struct {
	cause string
	errs  []error
}{
	{metrics.CauseContextLength, []error{stage.ErrContextLength}},
	{metrics.CauseContextFull, []error{gpu.ErrContextFull}},
	{metrics.CauseDecodeFailed, []error{gpu.ErrDecode}},
	{metrics.CauseEnginePanic, []error{gpu.ErrPanic}},
	{metrics.CauseSampler, []error{gpu.ErrNoLogits, gpu.ErrGrammarStuck}},
	{metrics.CauseSequenceBusy, []error{gpu.ErrBusy}},
	{metrics.CauseEmptyHistory, []error{gpu.ErrEmptyHistory}},
	{metrics.CauseInvalidToken, []error{gpu.ErrInvalidToken}},
	{metrics.CauseTemplate, []error{stage.ErrTemplate}},
	{metrics.CauseOverloaded, []error{stage.ErrQueueFull, gpu.ErrNoFreeSlot}},
	{metrics.CauseCancelled, []error{context.Canceled, context.DeadlineExceeded}},
	{metrics.CauseClosed, []error{gpu.ErrClosed, stage.ErrClosed}},
	{metrics.CauseSynthesis, []error{stage.ErrSynthesis}},
	{metrics.CauseInvalidRequest, []error{stage.ErrInvalidRequest}},
}

// ErrorCause names the condition behind an engine failure: one of metrics.EngineErrorCauses,
// metrics.CauseUnknown when err wraps none of the known sentinels (its log line then carries
// the whole chain).
func ErrorCause(err error) string {
	if err == nil {
		return metrics.CauseUnknown
	}
	var ue *stage.UpstreamError
	if errors.As(err, &ue) {
		return metrics.CauseUpstream
	}
	for _, c := range causes {
		for _, e := range c.errs {
			if errors.Is(err, e) {
				return c.cause
			}
		}
	}
	return metrics.CauseUnknown
}
