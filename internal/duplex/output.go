package duplex

import (
	"fmt"
	"time"

	"github.com/omniserve/omniserve/internal/audio"
)

// OutputKind says what an Output carries.
type OutputKind int

// Output kinds.
const (
	// OutDecision is a duplex decision of stage 0 for one audio unit: listen or speak.
	OutDecision OutputKind = iota
	// OutTranscript is the final user transcript of an endpoint or commit.
	OutTranscript
	// OutText is a delta of generated text.
	OutText
	// OutAudio is a chunk of synthesized speech (stage 1) with the text of the phrase it speaks.
	OutAudio
	// OutFinished ends a response (or a chat request); it comes from the final stage.
	OutFinished
	// OutError reports a failure (of a response, or of appended input with Turn -1); an
	// OutFinished with reason error follows a response's.
	OutError
	// OutUsage is stage 0's token accounting of a duplex response (Output.Usage): once when
	// its prompt is in the engine, before the first OutText, and once more (Final) after the
	// last token, before OutFinished. Chat requests get none.
	OutUsage
	// OutToolCall is a complete tool call of the model (Output.ToolCall); its markup never
	// comes as OutText, nor is it spoken.
	OutToolCall
	// OutTranscriptDelta is words of the user's open utterance the recognizer settled on
	// (Options.TranscriptDeltas), before the utterance's OutTranscript; with empty Text, the
	// mark of a discard (the deltas before it were of the discarded audio).
	OutTranscriptDelta
	// OutTruncated reports that the engine dropped the oldest turns of the conversation to
	// keep it within its context (Options.Truncation; Output.Truncated); Turn is the turn
	// whose input caused it.
	OutTruncated
)

var outputKindNames = [...]string{"decision", "transcript", "text", "audio", "finished", "error", "usage", "tool_call", "transcript_delta", "truncated"}

func (k OutputKind) String() string {
	if k >= 0 && int(k) < len(outputKindNames) {
		return outputKindNames[k]
	}
	return fmt.Sprintf("OutputKind(%d)", int(k))
}

// Duplex decisions (Output.Decision).
const (
	DecisionListen = "listen"
	DecisionSpeak  = "speak"
)

// Finish reasons (Output.FinishReason).
const (
	FinishStop   = "stop"
	FinishLength = "length"
	FinishAbort  = "abort"
	FinishError  = "error"
	// FinishToolCalls ends a reply whose last output is a tool call, as Chat Completions
	// names it.
	FinishToolCalls = "tool_calls"
)

// Output is one output of a duplex stream, in the order the pipeline produced it.
type Output struct {
	Kind OutputKind
	// Turn is the id of the turn the output belongs to: the id the caller gave with the input
	// (listen decisions, transcripts) or with the response it answers; a response the stream
	// started by itself answers the current input's id. -1 for a failed append; chat requests
	// have turn 1.
	Turn     int
	Decision string // listen | speak (OutDecision)
	// EndOfTurn is how semantic_vad decided a speak decision's endpoint (nil otherwise).
	EndOfTurn *EndOfTurnDecision
	Text      string // transcript / text delta / the phrase an audio chunk speaks
	// Tokens is the number of model tokens behind an OutText delta (tokens whose text was held
	// back, such as the start of a possible stop string, count with the delta that releases it).
	Tokens int
	Audio  []float32
	// SampleRate of OutAudio: the talker's output rate (24 kHz by default), mono.
	SampleRate   int
	FinishReason string // stop | length | tool_calls | abort | error
	Err          error
	Usage        *Usage     // OutUsage
	ToolCall     *ToolCall  // OutToolCall
	Truncated    *Truncated // OutTruncated
	// WordLogprobs of an OutTranscript: each word's log posterior when the stream asks for them
	// (Options.TranscriptLogprobs; non-nil then), nil otherwise.
	WordLogprobs []audio.WordLogprob
}

// Usage is a duplex response's token accounting, from the engine's own counts.
type Usage struct {
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

// Transcription is a committed utterance's final transcript and, when the stream asks for
// them (Options.TranscriptLogprobs), each word's log posterior: non-nil then, also for an
// empty transcript; nil when not asked.
type Transcription struct {
	Text     string
	Logprobs []audio.WordLogprob
	// RecognizerCPU is the CPU time the local recognizer spent on the utterance (decoding its
	// audio as it came, ending it, the logprobs' passes); 0 with a remote ASR, whose work is
	// not ours to measure.
	RecognizerCPU time.Duration
}
