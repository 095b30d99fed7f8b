package session

import "github.com/omniserve/omniserve/internal/mcpclient"

// The vocabulary the effects share: phases, errors, and the conversation's items as the client
// sees them.

// Phase is where in its life an item, a part, a call or a stretch of speech is: one effect type
// per concern carries it, so that a concern's added/done (or started/stopped) share their data.
type Phase int

// The phases. Each effect type documents which of them it takes.
const (
	PhaseAdded Phase = iota + 1
	PhaseDone
	PhaseRetrieved
	PhaseStarted
	PhaseStopped
	PhaseCleared
	PhaseDelta
	PhaseInProgress
	PhaseCompleted
	PhaseFailed
)

// Error is an error the client must hear of: Type is its class (invalid_request_error,
// server_error, rate_limit_error; ErrorType), EventID the client event it answers and Param the
// offending parameter ("" for none).
type Error struct{ Type, Code, Message, EventID, Param string }

// Item is a conversation item as the client sees it at the moment of the effect (a copy: the
// session goes on changing its own). Type is message, function_call, function_call_output,
// mcp_list_tools, mcp_call, mcp_approval_request or mcp_approval_response.
type Item struct {
	ID, Type, Role, Status string
	// Text is a text message's text, or the transcript of the assistant's audio.
	Text string
	// Audio: the message is audio (the user's input audio, or the assistant's output audio).
	Audio bool
	// Transcript is a user audio item's transcript ("" until its transcription completed).
	Transcript string
	// EmptyContent: the item was just added by a response, and its content starts empty.
	EmptyContent bool
	// function_call (CallID, Name, Arguments), function_call_output (CallID, Output) and MCP
	// items (ServerLabel, Name, Arguments).
	CallID, Name, Arguments, Output string
	ServerLabel                     string
	// MCPTools are an mcp_list_tools item's tools.
	MCPTools []mcpclient.Tool
	// MCP is what mcp_call and mcp_approval_* items carry besides.
	MCP MCPItem
}

// MCPItem is what an MCP call or approval item carries besides the common fields: the call's
// output or error, the approval request it answers or waits on, and an approval's answer.
type MCPItem struct {
	Output            *string
	Error             map[string]any
	ApprovalRequestID string
	Approve           bool
	Reason            string
}

func (Error) effect() {}
