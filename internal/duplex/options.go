package duplex

// Options configures the long-lived engine stream of one duplex session epoch. Zero values
// take the pipeline's settings (pipeline.thinker).
type Options struct {
	Instructions string // the system prompt; "" = thinker.instructions
	// AutoResponse: a VAD endpoint (speech, then Turn.SilenceDurationMs of silence, or
	// semantic_vad's decision) commits the user's audio and starts a response. Without it the
	// stream only listens until a commit or a response.
	AutoResponse bool
	WantAudio    bool
	MaxTokens    int // 0 = thinker.max_tokens
	// MaxHistoryBytes bounds the conversation's text (oldest messages dropped first); 0 =
	// unbounded.
	MaxHistoryBytes int
	// Truncation keeps the conversation the model reads within its context window, in tokens
	// (truncation.go); the zero value is "auto".
	Truncation Truncation
	// Turn is the session's turn detection: the stream's endpointing VAD (the speak decision of
	// the cascaded stage 0) runs on the settings of the session's VAD.
	Turn TurnDetection
	// Temperature and Seed override pipeline.thinker.sampling (nil = the pipeline's; without a
	// configured seed every response draws a fresh random one).
	Temperature *float64
	Seed        *uint32
	// TranscriptDeltas: without AutoResponse, the recognizer's settled words come as
	// OutTranscriptDelta outputs while audio is appended (input transcription deltas).
	TranscriptDeltas bool
	// TranscriptLogprobs: transcripts carry their words' log posteriors (Transcription.Logprobs,
	// Output.WordLogprobs); the stream's SetTranscriptLogprobs changes it later. Only the local
	// recognizer has them.
	TranscriptLogprobs bool
	// TranscribeOnly: a transcription session's stream: its transcripts never join a
	// conversation, and nothing is prefilled for a reply that never comes.
	TranscribeOnly bool
	// Dialect is the session's wire protocol (metrics.Dialects): it labels the stream's turns
	// in the --log-stats log lines, Prometheus and traces, and changes nothing else.
	Dialect string
}

// TurnDetection is turn_detection's part that a VAD and an endpointer read: its type, the
// VAD's settings and semantic_vad's eagerness. The session's VAD and the stream's endpointing
// VAD run on the same values.
type TurnDetection struct {
	Type string // server_vad | semantic_vad (TurnSemanticVAD)
	// Threshold in (0, 1] selects the WebRTC aggressiveness (speech.VADConfig); 0 = the
	// pipeline's.
	Threshold         float64
	PrefixPaddingMs   int
	SilenceDurationMs int
	Eagerness         string // semantic_vad's: low | medium | high | auto ("" = auto)
}

// TurnSemanticVAD is the TurnDetection.Type that selects semantic endpointing; any other value
// ("server_vad") ends a turn on silence alone.
const TurnSemanticVAD = "semantic_vad"

// End-of-turn reasons (EndOfTurnDecision.Reason).
const (
	EndOfTurnSemantic = "semantic" // the estimate reached the threshold
	EndOfTurnMaxWait  = "max_wait" // the pause reached the maximum wait
	EndOfTurnSilence  = "silence"  // no estimate: the silence window ended the turn
)

// SemanticEndpointing is semantic_vad's end-of-turn rule for one eagerness. docs/REALTIME.md
// says why these numbers.
type SemanticEndpointing struct {
	Threshold    float64 // an estimate at or above it ends the turn
	MinSilenceMs int     // the pause after which the thinker is asked
	MaxWaitMs    int     // the pause that ends the turn whatever the estimate
	SilenceMs    int     // without an estimate, the pause that ends the turn
}

// SemanticParams returns the rule of an eagerness (auto is medium, as OpenAI defines it). One
// table serves the session's conversation path and the auto-response stream's endpointing.
func SemanticParams(eagerness string) SemanticEndpointing {
	switch eagerness {
	case "low":
		return SemanticEndpointing{Threshold: 0.5, MinSilenceMs: 500, MaxWaitMs: 8000, SilenceMs: 1000}
	case "high":
		return SemanticEndpointing{Threshold: 0.05, MinSilenceMs: 200, MaxWaitMs: 2000, SilenceMs: 250}
	}
	return SemanticEndpointing{Threshold: 0.2, MinSilenceMs: 300, MaxWaitMs: 4000, SilenceMs: 500}
}

// EndOfTurnDecision is how semantic_vad ended a turn: carried by the speak decision of the
// endpoint it decided (Output.EndOfTurn).
type EndOfTurnDecision struct {
	Reason    string  // EndOfTurnSemantic, EndOfTurnMaxWait or EndOfTurnSilence
	Prob      float64 // the estimate, when Scored
	Scored    bool
	SilenceMs int // the pause's length in input audio when it was decided
}

// Message is one message of a response's own context (ResponseSpec.Input).
type Message struct{ Role, Text string }

// ResponseSpec is a response with per-response options beyond its length (OpenAI's
// response.create instructions, input, conversation "none" and tools).
type ResponseSpec struct {
	MaxTokens int // 0 = the stream's
	// Instructions, when set, are this response's own instructions. Over the conversation they
	// join the prompt as a system message after it, for this response only; with Input they are
	// the system prompt instead of the session's.
	Instructions *string
	// Input, when non-nil, replaces the conversation as the response's context (empty: the
	// instructions alone).
	Input []Message
	// OutOfBand keeps the reply out of the conversation (conversation "none").
	OutOfBand bool
	// Tools, when set, are the functions this reply may call and how (OutToolCall outputs).
	Tools *ToolSpec
	// Temperature, when set, samples this reply alone at it instead of the stream's
	// (vllm-omni's response.create temperature).
	Temperature *float64
}
