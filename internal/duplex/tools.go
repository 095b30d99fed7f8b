package duplex

import (
	"encoding/json"
	"errors"
)

// Tool is a function the model may call: its name, what it does, and the JSON schema of its
// arguments (nil: it takes none). Chat completions and realtime sessions declare them alike.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// Tool choices (ToolSpec.Choice). A named function is ToolChoiceFunction with ToolSpec.Function.
// A forced call is constrained by a grammar over the tools' schemas whose every string, array
// and number is bounded, so that it always finishes within max tokens.
const (
	ToolChoiceAuto     = "auto"     // the model decides; its own tool-call format is parsed from the stream
	ToolChoiceNone     = "none"     // tools are declared in the prompt but never called
	ToolChoiceRequired = "required" // a call is forced by a grammar over every tool's schema
	ToolChoiceFunction = "function" // a call of ToolSpec.Function is forced
)

// ToolSpec is the tools of one generation and how the model may call them.
type ToolSpec struct {
	Tools    []Tool
	Choice   string // ToolChoice*; "" = auto
	Function string // the forced function (Choice function)
	// Parallel lets the model make several calls in one reply; without it the first call ends
	// the reply's tool calls (later ones are dropped, as llama.cpp's grammar forbids them).
	Parallel bool
}

// Forces reports whether the spec forces a call (required, or a named function).
func (s *ToolSpec) Forces() bool {
	return s != nil && len(s.Tools) > 0 && (s.Choice == ToolChoiceRequired || s.Choice == ToolChoiceFunction)
}

// Parses reports whether the model's output is parsed for calls (auto or forced).
func (s *ToolSpec) Parses() bool {
	return s != nil && len(s.Tools) > 0 && s.Choice != ToolChoiceNone
}

// ToolCall is one call the model made. Arguments is a JSON object as text, as OpenAI's wire
// carries it. Index counts the reply's calls from 0.
type ToolCall struct {
	Index     int
	ID        string // call_<24 hex>
	Name      string
	Arguments string
}

// RoleToolCall is the role of an AppendText that restores a call the model made earlier (a
// client's function_call item): the text is the call as JSON (a ToolCall), which the stream
// writes as the assistant's, in the chat template's tool-call form.
const RoleToolCall = "tool_call"

// ErrToolBudget reports a max_tokens too small for any call of the forced tools.
var ErrToolBudget = errors.New("max_tokens leaves no room for a complete tool call")
