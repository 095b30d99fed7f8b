package session

import (
	"context"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/requestclient"
)

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
	Open(ctx context.Context, f requestclient.Fence, opts duplex.Options, out func(duplex.Output)) (Engine, error)
}

// Engine is the per-session engine handle (requestclient.DuplexRequest behind the pipeline
// backend). out is called from engine goroutines and must not block; the session queues outputs
// for its actor.
//
// Every input carries the id of the turn it belongs to (the session numbers turns,
// Session.input): the engine tags its rows and outputs with it. A response's turn has one
// handle: BeginTurn returns it, Respond takes it, and the session, the turn's owner, ends it
// once with EndTurn and the turn's outcome.
type Engine interface {
	AppendAudio(ctx context.Context, turn int, pcm16k []float32) error
	// Commit ends the input's utterance and returns its transcript, with its words' logprobs
	// when the stream gives them (duplex.Options.TranscriptLogprobs).
	Commit(ctx context.Context, turn int, respond bool) (duplex.Transcription, error)
	AppendText(ctx context.Context, turn int, role, text string) error
	Signal(ctx context.Context, event string, next requestclient.Fence) error
	Close(ctx context.Context, reason string) error
	Abort()
	MarkTurnArrival(turn int, ts float64) float64
	// BeginTurn begins the turn of a response answering input turn and returns its handle.
	BeginTurn(turn int, responseID string, turnID int, arrival float64) requestclient.Turn
	// Respond starts the response of t with spec's options and returns the engine turn it runs
	// under: t's id, unless the engine already answered that input by itself (auto-response),
	// then the next. An engine without per-response options refuses a spec that has them.
	Respond(ctx context.Context, t requestclient.Turn, spec duplex.ResponseSpec) (int, error)
	// EndTurn ends t's turn with its outcome; settle, when not nil, must run after the commands
	// of the input the response answered (requestclient.DuplexRequest.EndTurn).
	EndTurn(t requestclient.Turn, o requestclient.TurnOutcome) (closed bool, settle func(context.Context) error)
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

// turnStatsMarker is implemented by engines that keep per-turn statistics: the session reports
// where the user's input ended and when it was cleared (what a response's turn delivered is in
// its outcome, EndTurn).
type turnStatsMarker interface {
	MarkInputEnd(turn int, ts float64)
	// ClearTurnInput abandons turn's input (input_audio_buffer.clear); the session's next
	// input takes a new id.
	ClearTurnInput(turn int)
	// ObserveBargeIn reports a server-VAD barge-in: seconds from the speech onset to the cut.
	ObserveBargeIn(latencyS float64)
}

// turnStats returns the engine's turnStatsMarker, or nil.
func turnStats(e Engine) turnStatsMarker {
	m, _ := e.(turnStatsMarker)
	return m
}
