package live

import "encoding/json"

// The server events of Live. Each payload declares its fields in alphabetical order of their
// JSON names, as internal/protocol's do (the transport splices type and event_id into a sorted
// object). Every one implements protocol.ServerEvent.

// Resource is Live's SessionResource: the configuration with its defaults filled in, and the
// session's id, expiry and status (always "active", also in the final snapshot).
type Resource struct {
	Audio        ResourceAudio   `json:"audio"`
	Delegation   json.RawMessage `json:"delegation"`
	ExpiresAt    int64           `json:"expires_at"`
	ID           string          `json:"id"`
	Input        []InitialItem   `json:"input"`
	Instructions *string         `json:"instructions"`
	Model        string          `json:"model"`
	Status       string          `json:"status"`
	Store        bool            `json:"store"`
}

// ResourceAudio is the session's audio: one format both ways, and the voice.
type ResourceAudio struct {
	Format AudioFormat `json:"format"`
	Output AudioOutput `json:"output"`
}

// AudioFormat is Live's audio format: audio/pcm (16 or 24 kHz), audio/pcmu or audio/pcma (8 kHz).
type AudioFormat struct {
	Rate int    `json:"rate"`
	Type string `json:"type"`
}

// AudioOutput is the voice, as the client named it (a name, or {id}).
type AudioOutput struct {
	Voice json.RawMessage `json:"voice"`
}

// InitialItem is one message of the text history given at start.
type InitialItem struct {
	Content []ContentPart `json:"content"`
	ID      string        `json:"id,omitempty"`
	Role    string        `json:"role"`
	Status  string        `json:"status,omitempty"`
	Type    string        `json:"type"`
}

// ContentPart is an initial item's one text part.
type ContentPart struct {
	Text string `json:"text"`
	Type string `json:"type"`
}

// sessionEvent is session.started and session.updated.
type sessionEvent struct {
	kind          string
	ClientEventID string   `json:"client_event_id,omitempty"`
	Session       Resource `json:"session"`
}

func (e sessionEvent) EventType() string { return e.kind }

// ackEvent is an event with nothing but the command it answers: session.input_audio.muted and
// unmuted.
type ackEvent struct {
	kind          string
	ClientEventID string `json:"client_event_id,omitempty"`
}

func (e ackEvent) EventType() string { return e.kind }

// appendedEvent is session.{instructions,thinking,commentary}.appended: the context was taken
// at [start_ms, end_ms] of the timeline.
type appendedEvent struct {
	kind          string
	ClientEventID string `json:"client_event_id,omitempty"`
	EndMs         int64  `json:"end_ms"`
	StartMs       int64  `json:"start_ms"`
}

func (e appendedEvent) EventType() string { return e.kind }

// transcriptDelta is session.input_transcript.delta and session.output_transcript.delta.
type transcriptDelta struct {
	kind    string
	Delta   string `json:"delta"`
	EndMs   int64  `json:"end_ms"`
	StartMs int64  `json:"start_ms"`
}

func (e transcriptDelta) EventType() string { return e.kind }

// audioDelta is session.output_audio.delta: base64 audio in the session's format.
type audioDelta struct {
	Delta []byte `json:"delta"`
}

func (audioDelta) EventType() string { return "session.output_audio.delta" }

// reflectedOutput is a WebRTC session's reply audio as its sidebands get it:
// session.output_audio.delta with its place on the output track, [start_ms, end_ms).
type reflectedOutput struct {
	Delta   []byte `json:"delta"`
	EndMs   int64  `json:"end_ms"`
	StartMs int64  `json:"start_ms"`
}

func (reflectedOutput) EventType() string { return "session.output_audio.delta" }

// reflectedInput is a WebRTC session's microphone audio (before muting) as its sidebands get
// it: the server event session.input_audio.append.
type reflectedInput struct {
	Audio []byte `json:"audio"`
}

func (reflectedInput) EventType() string { return "session.input_audio.append" }

// Usage is the session's cumulative usage: seconds of its timeline.
type Usage struct {
	Seconds float64 `json:"seconds"`
}

// ContextWindow is how full the session's context is (tokens in its KV sequence / n_ctx).
type ContextWindow struct {
	UsageRatio float64 `json:"usage_ratio"`
}

// usageEvent is session.usage.updated.
type usageEvent struct {
	ContextWindow *ContextWindow `json:"context_window,omitempty"`
	Usage         Usage          `json:"usage"`
}

func (usageEvent) EventType() string { return "session.usage.updated" }

// closedEvent is session.closed, the session's last event.
type closedEvent struct {
	ClientEventID string   `json:"client_event_id,omitempty"`
	Reason        string   `json:"reason"`
	Session       Resource `json:"session"`
	Usage         Usage    `json:"usage"`
}

func (closedEvent) EventType() string { return "session.closed" }

// ErrorBody is the error object of Live's error event.
type ErrorBody struct {
	ClientEventID string `json:"client_event_id,omitempty"`
	Code          string `json:"code"`
	Message       string `json:"message"`
	Param         string `json:"param,omitempty"`
	Type          string `json:"type"`
}

// ErrorEvent is Live's error event.
type ErrorEvent struct {
	ClientEventID string    `json:"client_event_id,omitempty"`
	Error         ErrorBody `json:"error"`
}

// EventType implements protocol.ServerEvent.
func (ErrorEvent) EventType() string { return "error" }

// Delegation is a delegation's reference in session.delegation.created.
type Delegation struct {
	ID         string `json:"id"`
	ResponseID string `json:"response_id,omitempty"`
	Target     string `json:"target"`
	Type       string `json:"type"`
}

// delegationCreated is session.delegation.created.
type delegationCreated struct {
	Delegation Delegation `json:"delegation"`
	OffsetMs   int64      `json:"offset_ms"`
}

func (delegationCreated) EventType() string { return "session.delegation.created" }

// responseEvent is response.event: one event of a Responses delegation's stream.
type responseEvent struct {
	ClientEventID string         `json:"client_event_id,omitempty"`
	DelegationID  string         `json:"delegation_id,omitempty"`
	Event         map[string]any `json:"event"`
}

func (responseEvent) EventType() string { return "response.event" }
