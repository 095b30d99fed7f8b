package session

import (
	"context"

	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// OpenOptions configures the long-lived engine stream of a session.
type OpenOptions struct {
	Instructions      string
	AutoResponse      bool
	WantAudio         bool
	MaxTokens         int
	Temperature       *float64
	Seed              *uint32 // nil = the pipeline's default (random unless configured)
	MaxHistoryBytes   int     // the conversation's text budget (the engine's copy)
	VADThreshold      float64
	PrefixPaddingMs   int
	SilenceDurationMs int
	// TranscriptDeltas asks for the settled words of the open utterance while audio is
	// appended (input transcription: transcription sessions, and conversations with it on).
	TranscriptDeltas bool
	// TurnType and Eagerness are turn_detection's type and semantic_vad eagerness: with
	// AutoResponse, semantic_vad has the engine stream end turns on its end-of-turn estimate.
	TurnType, Eagerness string
	// TranscriptLogprobs asks for each word's log posterior with the transcripts (include
	// item.input_audio_transcription.logprobs); transcriptLogprobSetter changes it later.
	TranscriptLogprobs bool
	// TranscribeOnly: a transcription session's stream, whose transcripts never join a
	// conversation (nothing is prefilled for a reply that never comes).
	TranscribeOnly bool
}

// transcriptLogprobBackend is implemented by backends that can tell whether their
// transcripts can carry word logprobs; one without it cannot.
type transcriptLogprobBackend interface {
	SupportsTranscriptLogprobs() bool
}

// transcriptLogprobSetter is implemented by engines whose transcript logprobs can be turned on
// or off on an open stream, in order with the commits around the call.
type transcriptLogprobSetter interface {
	SetTranscriptLogprobs(ctx context.Context, on bool) error
}

// Backend opens engine streams. It is declared here, by its consumer; the production
// implementation is NewPipelineBackend over internal/requestclient.
type Backend interface {
	SupportsDuplex() bool
	Open(ctx context.Context, f requestclient.Fence, opts OpenOptions, out func(requestclient.Output)) (Engine, error)
}

// Engine is the per-session engine handle (requestclient.DuplexRequest behind the pipeline backend). out is called from engine
// goroutines and must not block; the session queues outputs for its actor.
//
// Every input and response carries the id of the turn it belongs to (the session numbers turns,
// Session.input): the engine tags its rows and outputs with it, and the session, the turn's
// owner, closes it once with FinalizeTurn.
type Engine interface {
	AppendAudio(ctx context.Context, turn int, pcm16k []float32) error
	// Commit ends the input's utterance and returns its transcript, with its words' logprobs
	// when the stream gives them (OpenOptions.TranscriptLogprobs).
	Commit(ctx context.Context, turn int, respond bool) (requestclient.Transcription, error)
	AppendText(ctx context.Context, turn int, role, text string) error
	// Respond starts turn's response and returns the id it runs under: turn, unless the engine
	// already answered that input by itself (auto-response), then the next.
	Respond(ctx context.Context, turn, maxTokens int) (int, error)
	Signal(ctx context.Context, event string, next requestclient.Fence) error
	Close(ctx context.Context, reason string) error
	Abort()
	MarkTurnArrival(turn int, ts float64) float64
	BeginTurn(turn int, responseID string, turnID int, arrival float64)
	FinalizeTurn(turn int, reason string) bool
}

// AudioDiscarder is implemented by engines that can forget uncommitted audio
// (input_audio_buffer.clear). Only with it does a response_required session stream appended
// audio into the engine ahead of the commit; without it the audio waits for the commit.
type AudioDiscarder interface {
	DiscardAudio(ctx context.Context) error
}

// TurnCanceller is implemented by engines that can stop one response by its engine turn
// number without touching a response queued after it.
type TurnCanceller interface {
	CancelTurn(turn int)
}

// unstartedTurnFinalizer is implemented by engines whose turn statistics can wait for the input
// of a response cancelled before its engine response started: FinalizeUnstartedTurn ends such a
// turn (instead of FinalizeTurn), and SettleInput, run as a job after the input's commands,
// lets it be logged once that input's work (transcription, prefill) was counted.
type unstartedTurnFinalizer interface {
	FinalizeUnstartedTurn(turn int, reason string) bool
	SettleInput(ctx context.Context, turn int) error
}

// turnStatsMarker is implemented by engines that keep per-turn statistics: the session reports
// where the user's input ended, when it was cleared, and how much audio the client was sent.
type turnStatsMarker interface {
	MarkInputEnd(turn int, ts float64)
	// ClearTurnInput abandons turn's input (input_audio_buffer.clear); the session's next
	// input takes a new id.
	ClearTurnInput(turn int)
	SetTurnDelivered(turn int, audioMs, underrunMs float64)
	// ObserveBargeIn reports a server-VAD barge-in: seconds from the speech onset to the cut.
	ObserveBargeIn(latencyS float64)
}

// turnDetachMarker is implemented by engines that keep per-turn statistics: a turn whose
// client was disconnected and resumed records how long delivery was paused (delivery delay).
type turnDetachMarker interface {
	SetTurnDetached(turn int, ms float64)
}

// turnPlaybackMarker is implemented by engines that keep per-turn statistics: the audio the
// client acknowledged as played (its last playback.ack of the response), next to what was sent.
type turnPlaybackMarker interface {
	SetTurnPlayed(turn int, ms float64)
}

// turnToolMarker is implemented by engines that keep per-turn statistics: the tool calls timed
// for the turn (the MCP calls the server ran during it, the function calls whose outputs came
// before it), handed over once when the session ends the response, before FinalizeTurn. The
// turn's record then feeds them to its table, Prometheus and its trace alike.
type turnToolMarker interface {
	AddTurnToolCalls(turn int, calls []metrics.ToolCallStats)
}

// turnStats returns the engine's turnStatsMarker, or nil.
func turnStats(e Engine) turnStatsMarker {
	m, _ := e.(turnStatsMarker)
	return m
}
