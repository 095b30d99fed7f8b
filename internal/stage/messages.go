package stage

import (
	"errors"
	"fmt"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/speech"
)

// Sink receives everything a request produces; internal/requestclient implements it.
// Calls for one request (or duplex stream) come from one goroutine, in order. A Sink must not
// block for long: while it does, the request's stages wait (other requests do not).
type Sink interface {
	OnOutput(OutputMessage)
	OnStageMetrics(StageMetricsMessage)
	OnTransfer(TransferEvent) // connector TX: size and hand-off time of one send
}

// OutputMessage is one output of a stage for a request: the output as the duplex session and
// the chat client read it (duplex.Output, passed up as is), and what the request client keeps
// for the statistics.
type OutputMessage struct {
	duplex.Output
	RequestID string
	StageID   int
	// Logprobs of the tokens behind an OutText delta, when the request's sampling asked for them
	// (tokens whose text was cut by a stop string have none).
	Logprobs      []gpu.TokenLogprob
	Finished      bool
	Metrics       *metrics.StageRequestStats
	StageSubmitTS float64
}

// StageMetricsMessage is one stage's statistics snapshot for one request (or one unit or
// response of a duplex stream).
type StageMetricsMessage struct {
	RequestID       string
	StageID         int
	Turn            int // the turn id the work was for (OutputMessage.Turn)
	Metrics         metrics.StageRequestStats
	StageSubmitTS   float64 // wall-clock unix seconds when the stage started this work
	FinalOutputType string
}

// TransferEvent is the TX side of one connector send; the RX side arrives in the receiving
// stage's StageRequestStats.
type TransferEvent struct {
	From, To  int
	RequestID string
	Turn      int // the turn id the send belongs to (1 for chat)
	SizeBytes int64
	// TxMs is the hand-off cost only: encoding and enqueueing. Time spent waiting for room on a
	// full queue is BlockedMs (backpressure), not transfer time.
	TxMs      float64
	BlockedMs float64
	UsedShm   bool
}

// TurnEnd reports that every stage is finished with one response (Turn) of a request or duplex
// stream: each stage that worked for it delivered its (possibly partial) StageMetricsMessage
// before this.
type TurnEnd struct {
	RequestID string
	Turn      int
	Aborted   bool
	// InputSettled marks the answer to DuplexStream.SettleInput rather than a response's end:
	// every row of the input given before the call (listen units, the prefill of committed
	// history) was delivered before it. Turn is the id of that input's turn; no response of it
	// ran, so it is not finished.
	InputSettled bool
}

// TurnEndSink is implemented by Sinks that want TurnEnd reports (checked by the dispatcher, so
// Sinks without it need nothing).
type TurnEndSink interface {
	OnTurnEnd(TurnEnd)
}

// ChatRequest is one chat completion.
type ChatRequest struct {
	RequestID string
	Messages  []ChatMessage
	MaxTokens int // 0 = thinker.max_tokens
	// MaxTokensSet says the client asked for MaxTokens: a prompt that leaves less room than
	// that is refused (ContextLengthError) instead of getting a shorter completion.
	MaxTokensSet bool
	Stop         []string
	Sampling     gpu.Sampling
	WantAudio    bool
	// Tools, when set, declares functions in the prompt and says how the model may call them
	// (tools.go); its calls come as OutToolCall outputs and end with reason tool_calls.
	Tools *duplex.ToolSpec
}

// ChatMessage is one message of a chat request; Audio (16 kHz mono) is transcribed by the ASR
// and joins Text. An assistant message may carry the ToolCalls it made; a message of role
// "tool" is the result of the call ToolCallID.
type ChatMessage struct {
	Role       string
	Text       string
	Audio      []float32
	ToolCalls  []duplex.ToolCall
	ToolCallID string
}

// DuplexOptions configures a duplex stream: the session's settings as it gave them
// (duplex.Options, passed down as is; its Turn drives the stream's endpointing VAD and
// semantic_vad) and what the request client and tests add.
type DuplexOptions struct {
	duplex.Options
	RequestID string
	// Sampling is the stream's: the request client gives pipeline.thinker.sampling
	// (Pipeline.DuplexSampling) with Options.Temperature and Seed applied.
	Sampling gpu.Sampling
	// VAD is the stream VAD's configuration: OpenDuplex fills it from Options.Turn and
	// pipeline.thinker.vad (a test may set other fields, such as its sample rate).
	VAD speech.VADConfig
	// PreemptiveMs: with AutoResponse, start the response speculatively after this much of the
	// endpoint's silence, releasing its outputs only when the endpoint is confirmed with the same
	// transcript (see preempt.go). 0 = thinker.preemptive_ms; negative disables.
	PreemptiveMs int
}

// Errors of this package; speech's sentinels (ErrOddLength, ErrNonFinite, ErrUnsupportedRate,
// ErrEmptyAudio, ErrEmptyText) are returned wrapped for bad audio and text.
var (
	// ErrQueueFull reports a stage whose workers and queue are all taken.
	ErrQueueFull = errors.New("stage: queue full")
	// ErrClosed reports use of a closed pipeline, request or stream.
	ErrClosed = errors.New("stage: closed")
	// ErrInvalidRequest reports a malformed request: no messages, an unknown role.
	ErrInvalidRequest = errors.New("stage: invalid request")
	// errNoDuplex reports OpenDuplex on a pipeline without an ASR.
	errNoDuplex = errors.New("stage: pipeline does not support duplex")
	// ErrContextLength reports a prompt that does not fit the model's context window; the
	// error is a *ContextLengthError.
	ErrContextLength = errors.New("stage: prompt exceeds the context window")
	// ErrTemplate reports a conversation the chat template could not render.
	ErrTemplate = errors.New("stage: chat template")
	// ErrSynthesis reports a phrase the talker could not voice (the TTS failed).
	ErrSynthesis = errors.New("stage: speech synthesis")
)

// ContextLengthError reports a chat prompt (plus the requested completion) longer than the
// sequence's context window. PromptTokens is 0 when the prompt was refused by its size alone.
type ContextLengthError struct {
	PromptTokens, CompletionTokens, Limit int
}

func (e *ContextLengthError) Error() string {
	switch {
	case e.PromptTokens == 0:
		return fmt.Sprintf("This model's maximum context length is %d tokens, and your messages are far longer. Please reduce the length of the messages.", e.Limit)
	case e.CompletionTokens > 0:
		return fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			e.Limit, e.PromptTokens+e.CompletionTokens, e.PromptTokens, e.CompletionTokens)
	}
	return fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", e.Limit, e.PromptTokens)
}

// Is makes errors.Is(err, ErrContextLength) true.
func (e *ContextLengthError) Is(target error) bool { return target == ErrContextLength }

// turnVAD is the stream VAD's configuration v with the session's turn detection t over it
// (where t sets a value): the one translation of turn_detection into the VAD library's terms;
// pipeline.thinker.vad fills what neither sets (Pipeline.vadConfig).
func turnVAD(v speech.VADConfig, t duplex.TurnDetection) speech.VADConfig {
	if t.Threshold != 0 {
		v.Threshold = t.Threshold
	}
	if t.PrefixPaddingMs != 0 {
		v.PrefixPaddingMs = t.PrefixPaddingMs
	}
	if t.SilenceDurationMs != 0 {
		v.SilenceDurationMs = t.SilenceDurationMs
	}
	return v
}
