package session

// The effects of a response's life: started and done with its status and usage, its output
// item, content parts, deltas and their ends, the engine's listen/speak decisions, playback and
// the rate limits after it.

// ResponseInfo is a response as the client sees it in its start and end.
type ResponseInfo struct {
	ID     string
	Status string // in_progress, completed, incomplete, cancelled, failed
	// StatusDetails say why a response did not complete (nil when it did, or is in progress).
	StatusDetails *StatusDetails
	// Output is the response's output items (empty while in progress).
	Output []Item
	// ConversationID is nil for an out-of-band response.
	ConversationID  *string
	Metadata        map[string]string
	MaxOutputTokens int
	SessionID       string
	Epoch, TurnID   int
	AudioSentMs     float64
	// Audio: the response speaks (its transcript rides along); else it writes text.
	Audio       bool
	Format      AudioFormat
	Voice       string
	Temperature float64
	// Usage is nil until the response is done.
	Usage *Usage
}

// StatusDetails say why a response ended as it did: Type is its status, Reason the cause.
type StatusDetails struct{ Type, Reason string }

// Usage is a response's token accounting.
type Usage struct {
	InputTokens, OutputTokens, TotalTokens int
	InputText, InputAudio                  int
	Cached, CachedText, CachedAudio        int
	OutputText, OutputAudio                int
}

// ResponseStarted: a response began (its output item follows).
type ResponseStarted struct{ Response ResponseInfo }

// ResponseDone: a response ended, with its status, output and usage.
type ResponseDone struct{ Response ResponseInfo }

// OutputItem is a response's output item: Phase is PhaseAdded or PhaseDone.
type OutputItem struct {
	Phase       Phase
	ResponseID  string
	OutputIndex int
	Item        Item
}

// PartKind is what a content part carries.
type PartKind int

// The kinds of a response's content part and of its output stream.
const (
	PartText PartKind = iota + 1
	PartAudio
	// PartTranscript is the transcript of the audio (deltas and done only; the part is PartAudio).
	PartTranscript
)

// ContentPart is a response's content part: Phase is PhaseAdded or PhaseDone; Text is the text,
// or the audio's transcript, at done.
type ContentPart struct {
	Phase              Phase
	ResponseID, ItemID string
	Kind               PartKind
	Text               string
}

// OutputDelta is a piece of a response's output: text, audio (Audio in Format, DurationMs long)
// or the audio's transcript (Text).
type OutputDelta struct {
	Kind               PartKind
	ResponseID, ItemID string
	Text               string
	Audio              []byte
	Format             AudioFormat
	DurationMs         float64
}

// OutputDone: a response's output of Kind is complete; Text is the whole text or transcript.
type OutputDone struct {
	Kind               PartKind
	ResponseID, ItemID string
	Text               string
}

// TurnDecision is the engine's decision at the end of the user's turn (auto_response): to
// listen on (no response), or to speak (ResponseID, ItemID name the response that speaks).
type TurnDecision struct {
	Speak              bool
	SessionID          string
	Epoch, Turn        int
	ResponseID, ItemID string
	// Reason is why a turn ended in a listen without a response ("" for the engine's listen
	// decision on streamed audio): ReasonSilence, ReasonNoOutput.
	Reason string
}

// AudioBuffer is the client's output audio buffer: PhaseStarted and PhaseStopped (a WebRTC
// call's playout), PhaseCleared (the audio it holds is to be dropped; ResponseID "" when no
// response was active; AudioEndMs, when set, is how much of ItemID was played).
type AudioBuffer struct {
	Phase              Phase
	ResponseID, ItemID string
	AudioEndMs         *int
}

// PlaybackAcknowledged answers the client's report of what it played of a response.
type PlaybackAcknowledged struct {
	ResponseID, ItemID string
	PlayedMs, SentMs   int
	// CommittedMs is what the conversation keeps of the audio; Truncated: the ack cut the item.
	CommittedMs int
	Truncated   bool
}

// RateLimits are the limits in force after a response.
type RateLimits struct{ Limits []RateLimit }

// RateLimit is one limit: its name, size, what remains and when it resets.
type RateLimit struct {
	Name             string
	Limit, Remaining int
	ResetSeconds     float64
}

func (ResponseStarted) effect()      {}
func (ResponseDone) effect()         {}
func (OutputItem) effect()           {}
func (ContentPart) effect()          {}
func (OutputDelta) effect()          {}
func (OutputDone) effect()           {}
func (TurnDecision) effect()         {}
func (AudioBuffer) effect()          {}
func (PlaybackAcknowledged) effect() {}
func (RateLimits) effect()           {}
