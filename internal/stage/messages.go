package stage

import (
	"errors"
	"fmt"
	"time"

	"github.com/omniserve/omniserve/internal/audio"
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

// OutputKind says what an OutputMessage carries.
type OutputKind int

// Output kinds.
const (
	// Decision is a duplex decision of stage 0 for one audio unit: "listen" or "speak".
	Decision OutputKind = iota
	// Transcript is the final user transcript of an endpoint or commit (stage 0).
	Transcript
	// Text is a delta of generated text (stage 0).
	Text
	// Audio is a chunk of synthesized speech (stage 1) with the text of the phrase it speaks.
	Audio
	// Finished ends a response or chat request; it comes from the final stage.
	Finished
	// Error reports a failure of a response or chat request; a Finished with reason "error" follows.
	Error
	// Usage is stage 0's token accounting of a duplex response (OutputMessage.Usage): once when
	// its prompt is in the engine, before the first Text, and once more (Final) after the last
	// token, before Finished. Chat requests get none (their usage comes from the stage metrics).
	Usage
	// ToolCalled is a complete tool call the model made (OutputMessage.ToolCall), from stage 0.
	// Its markup never comes as Text, and never reaches the talker.
	ToolCalled
	// TranscriptDelta is words of the user's open utterance the recognizer has settled on
	// (audio.StableDelta over its partial hypotheses), before its Transcript; only with
	// DuplexOptions.TranscriptDeltas on manual turns. One with empty Text marks a DiscardAudio:
	// the deltas before it were of the discarded audio.
	TranscriptDelta
)

var outputKindNames = [...]string{"decision", "transcript", "text", "audio", "finished", "error", "usage", "tool_call", "transcript_delta"}

func (k OutputKind) String() string {
	if k >= 0 && int(k) < len(outputKindNames) {
		return outputKindNames[k]
	}
	return fmt.Sprintf("OutputKind(%d)", int(k))
}

// Duplex decisions.
const (
	DecisionListen = "listen"
	DecisionSpeak  = "speak"
)

// Finish reasons.
const (
	FinishStop   = "stop"
	FinishLength = "length"
	FinishAbort  = "abort"
	FinishError  = "error"
)

// OutputMessage is one output of a stage for a request.
type OutputMessage struct {
	RequestID string
	StageID   int
	Kind      OutputKind
	// Turn is the id of the turn the output belongs to: on a duplex stream the id the caller
	// gave with the input (listen decisions, transcripts) or with Respond (a response's
	// outputs); a response the stream started by itself answers the current input's id.
	// Chat requests have turn 1.
	Turn     int
	Decision string // "listen" | "speak" (Kind == Decision)
	// EndOfTurn is how semantic_vad decided the endpoint of a speak Decision (nil otherwise).
	EndOfTurn *EndOfTurnDecision
	Text      string // transcript / text delta / audio's transcript segment
	// Tokens is the number of model tokens behind a Text delta (tokens whose text was held back,
	// such as the start of a possible stop string, count with the delta that releases it).
	Tokens int
	// Usage is the response's token accounting (Kind == Usage).
	Usage *TokenUsage
	// ToolCall is the call of a ToolCalled output.
	ToolCall *ToolCall
	// Logprobs of the tokens behind a Text delta, when the request's sampling asked for them
	// (tokens whose text was cut by a stop string have none).
	Logprobs []gpu.TokenLogprob
	// WordLogprobs of a Transcript: each word's log posterior, when the stream asks for them
	// (DuplexOptions.TranscriptLogprobs; non-nil then); nil otherwise.
	WordLogprobs  []WordLogprob
	Audio         []float32
	SampleRate    int // Kind == Audio: OutputRate (24 kHz by default), mono
	Finished      bool
	FinishReason  string // stop | length | tool_calls | abort | error
	Metrics       *metrics.StageRequestStats
	StageSubmitTS float64
	Err           error
}

// TokenUsage is a duplex response's token accounting, from the engine's own counts.
type TokenUsage struct {
	// InputTokens is every token the model read for the response: the engine sequence's whole
	// history when generation began, the prompt template's tokens included.
	InputTokens int
	// CachedTokens is the part of InputTokens that was in the KV cache before the response's
	// turn (earlier turns' prompts and replies). InputTokens - CachedTokens are the tokens
	// prefilled for the turn: the num_tokens_in of its stage-0 statistics.
	CachedTokens int
	// OutputTokens is the number of tokens generated (the stage-0 num_tokens_out); set only in
	// the Final report.
	OutputTokens int
	Final        bool
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
	// (tools.go); its calls come as ToolCalled outputs and end with reason tool_calls.
	Tools *ToolSpec
}

// ChatMessage is one message of a chat request; Audio (16 kHz mono) is transcribed by the ASR
// and joins Text. An assistant message may carry the ToolCalls it made; a message of role
// "tool" is the result of the call ToolCallID.
type ChatMessage struct {
	Role       string
	Text       string
	Audio      []float32
	ToolCalls  []ToolCall
	ToolCallID string
}

// DuplexOptions configures a duplex stream.
type DuplexOptions struct {
	RequestID    string
	Instructions string // system prompt; "" = thinker.instructions
	VAD          speech.VADConfig
	// AutoResponse: a VAD endpoint (speech, then silence_duration_ms of silence) commits the
	// user's audio and starts a response ("speak"). Without it the stream only listens until
	// Commit or Respond, and the ASR hears all audio, not only the VAD's speech segments.
	AutoResponse bool
	WantAudio    bool
	MaxTokens    int
	Sampling     gpu.Sampling
	// MaxHistoryBytes bounds the conversation's text: past it the oldest messages (not the
	// instructions) are dropped before the next job (duplex_history.go). 0 = unbounded.
	MaxHistoryBytes int
	// PreemptiveMs: with AutoResponse, start the response speculatively after this much of the
	// endpoint's silence, releasing its outputs only when the endpoint is confirmed with the same
	// transcript (see preempt.go). 0 = thinker.preemptive_ms; negative disables.
	PreemptiveMs int
	// TranscriptDeltas: on manual turns (no AutoResponse), the recognizer's settled words go
	// out as TranscriptDelta outputs while the audio is appended (input transcription deltas
	// while the user speaks, in transcription sessions and conversations).
	TranscriptDeltas bool
	// TurnType is the session's turn_detection type: with AutoResponse, TurnSemanticVAD
	// endpoints on the thinker's end-of-turn estimate at the Eagerness's thresholds
	// (duplex_semvad.go); anything else on VAD.SilenceDurationMs of silence.
	TurnType  string
	Eagerness string // semantic_vad's: low, medium, high or auto ("" = auto)
	// TranscriptLogprobs: each final transcript carries its words' log posteriors
	// (Transcription.Logprobs, OutputMessage.WordLogprobs), at ~1.5 ms per utterance for the
	// lattice passes; SetTranscriptLogprobs changes it later. Only the local recognizer has
	// them: with a remote ASR OpenDuplex refuses it.
	TranscriptLogprobs bool
	// TranscribeOnly: the stream only transcribes (a transcription session): its transcripts go
	// out but never join the conversation, and the instructions are not read, so the thinker
	// prefills nothing for a reply that never comes. semantic_vad's estimate still scores the
	// partial transcript on the stream's sequence.
	TranscribeOnly bool
}

// Transcription is a committed utterance's final transcript and, when the stream asks for
// them (DuplexOptions.TranscriptLogprobs), each word's log posterior: non-nil then, also for
// an empty transcript; nil when not asked.
type Transcription struct {
	Text     string
	Logprobs []audio.WordLogprob
	// RecognizerCPU is the CPU time the local recognizer spent on the utterance (decoding its
	// audio as it came, ending it, the logprobs' passes); 0 with a remote ASR, whose work is
	// not ours to measure.
	RecognizerCPU time.Duration
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

// WordLogprob is one transcript word and the recognizer's log posterior of it
// (audio.WordLogprob), named here so that requestclient, which may not import audio, passes it.
type WordLogprob = audio.WordLogprob
