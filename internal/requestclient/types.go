package requestclient

import (
	"fmt"

	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/stage"
)

// The request, option and output types of this package are its own: the HTTP and session layers
// above speak them and import neither stage nor engine (test/deps_test.go). Each has one
// converter to its stage or engine counterpart, here, tested in types_test.go.

// The chat request and its tools are the pipeline's own types (one definition, no converter):
// requestclient owns only what it adds (the request id's suffix, the event stream).
type (
	// ChatRequest is one chat completion. An empty RequestID gets a fresh chatcmpl-<hex>; Chat
	// appends -<8 hex> for the internal id.
	ChatRequest = stage.ChatRequest
	// ChatMessage is one message of a chat request (stage.ChatMessage).
	ChatMessage = stage.ChatMessage
	// Tool is a function the model may call; Parameters is its arguments' JSON schema.
	Tool = stage.Tool
	// ToolSpec is the tools of one generation and how the model may call them.
	ToolSpec = stage.ToolSpec
	// ToolCall is one call the model made.
	ToolCall = stage.ToolCall
)

// Tool choices (ToolSpec.Choice): the model decides (its own call markup is parsed from the
// stream, never released as text), never calls, must call one of the tools, or must call
// ToolSpec.Function. A forced call is constrained by a grammar over the tools' schemas whose
// every string, array and number is bounded, so that it always finishes within max tokens.
const (
	ToolChoiceAuto     = stage.ToolChoiceAuto
	ToolChoiceNone     = stage.ToolChoiceNone
	ToolChoiceRequired = stage.ToolChoiceRequired
	ToolChoiceFunction = stage.ToolChoiceFunction
)

// FinishToolCalls is the finish reason of a reply that ended in tool calls.
const FinishToolCalls = stage.FinishToolCalls

// ErrToolBudget reports a max tokens too small for a complete forced call.
var ErrToolBudget = stage.ErrToolBudget

// CheckTools checks that a forced call of spec (or each tool, when nothing is forced) has a
// grammar within maxTokens: the errors the pipeline would give, before a request is built.
func CheckTools(spec ToolSpec, maxTokens int) error {
	return stage.CheckTools(spec, maxTokens)
}

// Limits of the sampling parameters: the engine's, as OpenAI documents them. Callers validate
// requests against them before they reach the engine (which checks them again).
const (
	MaxPenalty     = gpu.MaxPenalty     // presence_penalty and frequency_penalty lie in [-MaxPenalty, MaxPenalty]
	MaxLogitBias   = gpu.MaxLogitBias   // logit_bias values lie in [-MaxLogitBias, MaxLogitBias]
	MaxTopLogprobs = gpu.MaxTopLogprobs // top_logprobs lies in [0, MaxTopLogprobs]
)

// JSONObjectGrammar is the GBNF grammar of response_format {"type":"json_object"}: any JSON
// object (the engine's grammar).
const JSONObjectGrammar = gpu.JSONGrammar

// SchemaGrammar converts a JSON schema to a GBNF grammar for Sampling.Grammar (response_format
// json_schema) with the engine's converter. Errors name the parameter (SamplingErrorOf).
func SchemaGrammar(schema []byte) (string, error) { return gpu.SchemaGrammar(schema) }

// Sampling selects tokens: the engine's own definition (gpu.Sampling), so that one type
// carries sampling from the API to the engine with no copy to keep in step. Temperature 0 is
// greedy; TopK 0 and TopP 0 disable those filters; RepeatPenalty 0 means 1 (off). Equal Seed and
// history give equal tokens, unless RandomSeed.
type Sampling = gpu.Sampling

// TokenLogprob is one generated token's log probability and, when asked, the most likely
// alternatives at its position (after logit_bias and penalties, before temperature, top-k /
// top-p and grammar): the engine's definition.
type TokenLogprob = gpu.TokenLogprob

// DuplexOptions configures the long-lived stage-0 stream of a duplex session epoch.
type DuplexOptions struct {
	Instructions string // system prompt; "" = thinker.instructions
	// AutoResponse: a VAD endpoint (speech, then SilenceDurationMs of silence) commits the
	// user's audio and starts a response. Without it the stream only listens until Commit or
	// Respond.
	AutoResponse bool
	WantAudio    bool
	MaxTokens    int
	// MaxHistoryBytes bounds the conversation's text (oldest messages dropped first); 0 =
	// unbounded.
	MaxHistoryBytes int
	// The stream's endpointing VAD (the speak decision of the cascaded stage 0): the session's
	// turn_detection, so both VADs run on the same settings. VADThreshold in (0, 1] selects the
	// WebRTC aggressiveness (speech.VADConfig); 0 = pipeline.thinker.vad's.
	VADThreshold                       float64
	PrefixPaddingMs, SilenceDurationMs int
	// Temperature and Seed override pipeline.thinker.sampling (nil = the pipeline's; without a
	// configured seed every response draws a fresh random one).
	Temperature *float64
	Seed        *uint32
	// TranscriptDeltas: without AutoResponse, the recognizer's settled words come as
	// OutTranscriptDelta outputs while audio is appended.
	TranscriptDeltas bool
	// TurnType and Eagerness are the session's turn_detection type and semantic_vad eagerness:
	// with AutoResponse and TurnSemanticVAD the stream ends turns on the thinker's end-of-turn
	// estimate (its speak decision carries Output.EndOfTurn), not on SilenceDurationMs.
	TurnType, Eagerness string
	// TranscriptLogprobs: transcripts carry their words' log posteriors (Transcription,
	// Output.WordLogprobs); SetTranscriptLogprobs changes it later. Only the local recognizer
	// has them (SupportsTranscriptLogprobs).
	TranscriptLogprobs bool
	// TranscribeOnly: a transcription session's stream (stage.DuplexOptions.TranscribeOnly).
	TranscribeOnly bool
}

// Message is one message of a response's own context (ResponseSpec.Input).
type Message struct{ Role, Text string }

// ResponseSpec is a duplex response with per-response options beyond its length (OpenAI's
// response.create instructions, input and conversation "none").
type ResponseSpec struct {
	MaxTokens int // 0 = the stream's
	// Instructions, when set, are this response's own instructions (nil = the session's).
	Instructions *string
	// Input, when non-nil, replaces the conversation as the response's context (empty: the
	// instructions alone).
	Input []Message
	// OutOfBand keeps the reply out of the conversation (conversation "none").
	OutOfBand bool
	// Tools, when set, are the functions this reply may call and how (OutToolCall outputs).
	Tools *ToolSpec
}

// OutputKind says what a duplex Output carries.
type OutputKind int

// Output kinds.
const (
	// OutDecision is a duplex decision of stage 0 for one audio unit: listen or speak.
	OutDecision OutputKind = iota
	// OutTranscript is the final user transcript of an endpoint or commit.
	OutTranscript
	// OutText is a delta of generated text.
	OutText
	// OutAudio is a chunk of synthesized speech with the text of the phrase it speaks.
	OutAudio
	// OutFinished ends a response.
	OutFinished
	// OutError reports a failure (of a response, or of appended input with Turn -1); an
	// OutFinished with reason error follows a response's.
	OutError
	// OutUsage is the response's token accounting (Output.Usage).
	OutUsage
	// OutToolCall is a complete tool call of the model (Output.ToolCall); its markup never
	// comes as OutText, nor is it spoken.
	OutToolCall
	// OutTranscriptDelta is words of the user's open utterance the recognizer settled on
	// (DuplexOptions.TranscriptDeltas), before the utterance's OutTranscript; with empty Text,
	// the mark of a DiscardAudio (the deltas before it were of the discarded audio).
	OutTranscriptDelta
)

// Duplex decisions (Output.Decision).
const (
	DecisionListen = stage.DecisionListen
	DecisionSpeak  = stage.DecisionSpeak
)

// Output is one output of a duplex stream, in the order the pipeline produced it.
type Output struct {
	Kind OutputKind
	// Turn is the id of the turn it belongs to (the session's id, given with the input or the
	// Respond it answers); -1 for a failed append.
	Turn     int
	Decision string // listen | speak (OutDecision)
	// EndOfTurn is how semantic_vad decided a speak decision's endpoint (nil otherwise).
	EndOfTurn    *EndOfTurnDecision
	Text         string // transcript / text delta / the phrase an audio chunk speaks
	Tokens       int    // model tokens behind an OutText delta
	Audio        []float32
	SampleRate   int    // OutAudio: 24 kHz by default, mono
	FinishReason string // stop | length | abort | error
	Err          error
	Usage        *Usage    // OutUsage
	ToolCall     *ToolCall // OutToolCall
	// WordLogprobs of an OutTranscript: each word's log posterior when the stream asks for them
	// (DuplexOptions.TranscriptLogprobs; non-nil then), nil otherwise.
	WordLogprobs []stage.WordLogprob
}

// Transcription is a committed utterance's transcript and, when the stream asks for them,
// its words' log posteriors (stage.Transcription).
type Transcription = stage.Transcription

// Usage is a duplex response's token accounting, from the engine's own counts: InputTokens is
// everything the model read, CachedTokens the part of it already in the KV cache before the
// turn, OutputTokens what it generated (set when Final).
type Usage struct {
	InputTokens, CachedTokens, OutputTokens int
	Final                                   bool
}

// toStage converts duplex options for the pipeline over its default duplex sampling
// (pipeline.thinker.sampling).
func (o DuplexOptions) toStage(requestID string, base gpu.Sampling) stage.DuplexOptions {
	out := stage.DuplexOptions{
		RequestID:        requestID,
		Instructions:     o.Instructions,
		AutoResponse:     o.AutoResponse,
		WantAudio:        o.WantAudio,
		MaxTokens:        o.MaxTokens,
		MaxHistoryBytes:  o.MaxHistoryBytes,
		Sampling:         base,
		TranscriptDeltas: o.TranscriptDeltas,
		TurnType:         o.TurnType,
		Eagerness:        o.Eagerness,

		TranscriptLogprobs: o.TranscriptLogprobs,
		TranscribeOnly:     o.TranscribeOnly,
	}
	out.VAD.Threshold, out.VAD.PrefixPaddingMs, out.VAD.SilenceDurationMs = o.VADThreshold, o.PrefixPaddingMs, o.SilenceDurationMs
	if o.Temperature != nil {
		out.Sampling.Temperature = float32(*o.Temperature)
	}
	if o.Seed != nil {
		out.Sampling.Seed, out.Sampling.RandomSeed = *o.Seed, false
	}
	return out
}

// toStage converts a response spec for the pipeline.
func (s ResponseSpec) toStage() stage.ResponseSpec {
	out := stage.ResponseSpec{MaxTokens: s.MaxTokens, Instructions: s.Instructions, OutOfBand: s.OutOfBand, Tools: s.Tools}
	if s.Input != nil {
		out.Input = make([]gpu.ChatMessage, len(s.Input))
		for i, m := range s.Input {
			out.Input[i] = gpu.ChatMessage{Role: m.Role, Content: m.Text}
		}
	}
	return out
}

// outputFromStage converts one stage output for the session. A kind this package does not know
// becomes OutError, so that nothing new passes unnoticed.
func outputFromStage(m stage.OutputMessage) Output {
	o := Output{Turn: m.Turn, Decision: m.Decision, EndOfTurn: m.EndOfTurn, Text: m.Text, Tokens: m.Tokens, Audio: m.Audio,
		SampleRate: m.SampleRate, FinishReason: m.FinishReason, Err: m.Err, WordLogprobs: m.WordLogprobs}
	switch m.Kind {
	case stage.Decision:
		o.Kind = OutDecision
	case stage.Transcript:
		o.Kind = OutTranscript
	case stage.TranscriptDelta:
		o.Kind = OutTranscriptDelta
	case stage.Text:
		o.Kind = OutText
	case stage.Audio:
		o.Kind = OutAudio
	case stage.Finished:
		o.Kind = OutFinished
	case stage.ToolCalled:
		o.Kind = OutToolCall
		if c := m.ToolCall; c != nil {
			tc := ToolCall(*c)
			o.ToolCall = &tc
		}
	case stage.Usage:
		o.Kind = OutUsage
		if u := m.Usage; u != nil {
			o.Usage = &Usage{InputTokens: u.InputTokens, CachedTokens: u.CachedTokens, OutputTokens: u.OutputTokens, Final: u.Final}
		}
	default:
		o.Kind = OutError
		if o.Err == nil {
			o.Err = fmt.Errorf("stage output of unknown kind %v", m.Kind)
		}
	}
	return o
}
