package session

import (
	"github.com/omniserve/omniserve/internal/duplex"
)

// Command is one decoded client event, handed by internal/realtime to the session actor. Every
// command carries the client's event_id so that errors can echo it.
type Command interface {
	// EventID is the client event_id ("" when the client sent none).
	EventID() string
	// Type is the wire type, for errors and logs.
	Type() string
}

// Base carries the fields every command shares.
type Base struct {
	ID   string
	Kind string
}

// EventID implements Command.
func (b Base) EventID() string { return b.ID }

// Type implements Command.
func (b Base) Type() string { return b.Kind }

// UpdateSession is session.update; the first one creates the session.
type UpdateSession struct {
	Base
	Patch ConfigPatch
	// BetaSpelling: the session object uses beta-only fields (modalities, input_audio_format,
	// top-level turn_detection, ...) and no GA-only one; as a connection's first event it marks
	// a beta client that sent no OpenAI-Beta header (settings.go detectDialect).
	BetaSpelling bool
	// Transcription: sent as transcription_session.update, answered with
	// transcription_session.updated.
	Transcription bool
}

// AppendAudio is input_audio_buffer.append. Data is the decoded base64 payload in Format (or the
// session's input format when Format is nil); the session converts it to 16 kHz float32.
type AppendAudio struct {
	Base
	Data   []byte
	Format *AudioFormat
}

// CommitInput is input_audio_buffer.commit.
type CommitInput struct {
	Base
	ResponseCreate *bool
	// AcceptConsumed: audio came since the last commit, so a commit of audio the engine has
	// already taken (its own VAD ended the utterance) is accepted, not refused as empty
	// (vllm-omni's dialect, commit_outcome.go).
	AcceptConsumed bool
	// Silence: the client says the input is not speech (vllm-omni's is_speech: false): the
	// audio is dropped and the commit ends the turn with a listen (commit_outcome.go).
	Silence bool
	// OverlapTiers: the dialect's rule for a commit during a response (vllm-omni's
	// overlap_short_ack_ms): a short overlap is an acknowledgement (overlap_commit.go).
	OverlapTiers bool
}

// ClearInput is input_audio_buffer.clear.
type ClearInput struct{ Base }

// CreateResponse is response.create.
type CreateResponse struct {
	Base
	MaxOutputTokens *int
	Modalities      []string
	OutputFormat    *AudioFormat
	Metadata        map[string]string
	// Instructions is a per-response override (nil = the session's).
	Instructions *string
	// Conversation is "none" for an out-of-band response ("" or "auto": the default one).
	Conversation string
	// Input replaces the conversation as the response's context when non-nil (empty: none).
	Input []InputItem
	// ToolsSet: the response declares its own tools (replacing the session's); ToolChoice
	// and ParallelToolCalls override the session's for this response.
	ToolsSet          bool
	Tools             []duplex.Tool
	ToolChoice        *ToolChoice
	ParallelToolCalls *bool
	// Unsupported names a per-response option omniserve rejects ("" when none), as its param.
	Unsupported string
	// Temperature samples this response alone at it (nil: the session's); a dialect that
	// takes it checks its range.
	Temperature *float64
}

// CancelResponse is response.cancel.
type CancelResponse struct {
	Base
	ResponseID string
}

// CreateItem is conversation.item.create with a user (or system/assistant) message.
type CreateItem struct {
	Base
	ItemID         string
	PreviousItemID string // "" = append, "root" = first
	Role           string
	Text           string
	TextIndex      int    // the content part an error about Text names (item.content[TextIndex].text)
	Audio          []byte // decoded input_audio part, in the session's input format
	// ItemType "function_call" restores a call (CallID, Name, Arguments) the model made
	// earlier; "function_call_output" answers the call CallID with Output (tools.go);
	// "mcp_approval_response" answers the mcp_approval_request ApprovalRequestID (mcp_call.go).
	ItemType          string
	CallID, Output    string
	Name, Arguments   string
	ApprovalRequestID string
	Approve           bool
	Reason            string
}

// DeleteItem is conversation.item.delete.
type DeleteItem struct {
	Base
	ItemID string
}

// RetrieveItem is conversation.item.retrieve.
type RetrieveItem struct {
	Base
	ItemID string
}

// TruncateItem is conversation.item.truncate.
type TruncateItem struct {
	Base
	ItemID       string
	ContentIndex int
	AudioEndMs   int
}

// ClearOutputAudio is output_audio_buffer.clear.
type ClearOutputAudio struct {
	Base
	ResponseID string
}

// CancelInput is the duplex extension input.cancel.
type CancelInput struct{ Base }

// BargeIn is the duplex extension barge_in.
type BargeIn struct{ Base }

// InputActivity is client input a dialect holds itself (vllm-omni's open input item's text,
// until its commit): the session only notes the client's activity (its idle timeout).
type InputActivity struct{ Base }

// CloseSession is session.close.
type CloseSession struct{ Base }

// Heartbeat is session.heartbeat.
type Heartbeat struct{ Base }

// SignalTurn is a client's turn signal that asks for no action (vllm-omni's turn.signal with an
// event such as user_started or assistant_done): the session answers with its turn state.
type SignalTurn struct {
	Base
	Event string
}

// PlaybackAck is the duplex extension playback.ack: the client's playback cursor.
type PlaybackAck struct {
	Base
	PlayedMs   int
	ResponseID string
	ItemID     string
	Truncate   bool
	// CommittedMs is how much of the audio the client commits to the conversation (nil: the
	// played part); AckOnly: the history keeps only that much of the reply's text (vllm-omni's
	// playback_commit_policy ack_only), else all of it unless Truncate (playback_finished.go).
	CommittedMs *int
	AckOnly     bool
}
