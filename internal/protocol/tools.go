package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Tool is one entry of session.tools or response.tools. Function tools are flat (type, name,
// description, parameters); every other kind (mcp) keeps its object in Raw for the session's
// tool-kind dispatch, which knows what it supports.
type Tool struct {
	Type        string
	Name        string
	Description string
	Parameters  json.RawMessage // JSON schema; nil when absent or null
	Raw         json.RawMessage // the whole tool object
}

// ToolChoice is tool_choice: Mode auto | none | required, or function (Name) or mcp
// (ServerLabel, Name) for a forced tool.
type ToolChoice struct {
	Mode        string
	Name        string
	ServerLabel string
}

// Tool choice modes beyond the three strings.
const (
	ToolChoiceFunction = "function"
	ToolChoiceMCP      = "mcp"
)

// ToolsPatch is the tool fields of session.update or response.create; nil / unset fields were
// absent.
type ToolsPatch struct {
	ToolsSet          bool // tools was present (an empty array clears them)
	Tools             []Tool
	ToolChoice        *ToolChoice
	ParallelToolCalls *bool
}

// decodeToolsPatch reads tools, tool_choice and parallel_tool_calls of obj; prefix is the
// params' parent ("session" or "response").
func decodeToolsPatch(obj map[string]json.RawMessage, prefix string) (ToolsPatch, *Error) {
	var p ToolsPatch
	if v, ok := obj["tools"]; ok && !isNull(v) {
		var raws []json.RawMessage
		if json.Unmarshal(v, &raws) != nil {
			return p, &Error{Code: "invalid_type", Param: prefix + ".tools", Message: "tools must be an array of tool objects"}
		}
		p.ToolsSet = true
		p.Tools = make([]Tool, 0, len(raws))
		for i, r := range raws {
			t, e := decodeTool(r, fmt.Sprintf("%s.tools[%d]", prefix, i))
			if e != nil {
				return p, e
			}
			p.Tools = append(p.Tools, t)
		}
	} else if ok {
		p.ToolsSet = true // null: no tools
	}
	if v, ok := obj["tool_choice"]; ok && !isNull(v) {
		tc, e := decodeToolChoice(v, prefix+".tool_choice")
		if e != nil {
			return p, e
		}
		p.ToolChoice = &tc
	}
	if v, ok := obj["parallel_tool_calls"]; ok && !isNull(v) {
		var b bool
		if json.Unmarshal(v, &b) != nil {
			return p, &Error{Code: "invalid_type", Param: prefix + ".parallel_tool_calls", Message: "parallel_tool_calls must be a boolean"}
		}
		p.ParallelToolCalls = &b
	}
	return p, nil
}

func decodeTool(raw json.RawMessage, param string) (Tool, *Error) {
	var w struct {
		Type        *string         `json:"type"`
		Name        *string         `json:"name"`
		Description *string         `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil || obj == nil {
		return Tool{}, &Error{Code: "invalid_type", Param: param, Message: "a tool must be an object"}
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return Tool{}, &Error{Code: "invalid_type", Param: param, Message: fmt.Sprintf("the tool has a field of the wrong type: %v", err)}
	}
	t := Tool{Type: "function", Raw: raw}
	if w.Type != nil {
		t.Type = *w.Type
	}
	if t.Type != "function" {
		return t, nil // another kind: the session's dispatch reads Raw
	}
	if w.Name != nil {
		t.Name = *w.Name
	}
	if w.Description != nil {
		t.Description = *w.Description
	}
	if len(w.Parameters) > 0 && !isNull(w.Parameters) {
		t.Parameters = w.Parameters
	}
	return t, nil
}

// decodeToolChoice reads "auto" | "none" | "required", a function name (beta), or
// {"type":"function","name":...} / {"type":"mcp","server_label":...,"name":...} (GA).
func decodeToolChoice(raw json.RawMessage, param string) (ToolChoice, *Error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto", "none", "required":
			return ToolChoice{Mode: s}, nil
		case "":
			return ToolChoice{}, &Error{Code: "invalid_value", Param: param, Message: "tool_choice must be auto, none, required or a function"}
		}
		return ToolChoice{Mode: ToolChoiceFunction, Name: s}, nil // beta: a function's name
	}
	var w struct {
		Type        string `json:"type"`
		Name        string `json:"name"`
		ServerLabel string `json:"server_label"`
		Function    *struct {
			Name string `json:"name"`
		} `json:"function"` // Chat Completions' nesting, as some clients send it
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return ToolChoice{}, &Error{Code: "invalid_type", Param: param, Message: "tool_choice must be a string or an object {\"type\": \"function\", \"name\": ...}"}
	}
	switch w.Type {
	case ToolChoiceFunction:
		name := w.Name
		if name == "" && w.Function != nil {
			name = w.Function.Name
		}
		if name == "" {
			return ToolChoice{}, &Error{Code: "missing_required_parameter", Param: param + ".name", Message: "a function tool_choice needs the function's name"}
		}
		return ToolChoice{Mode: ToolChoiceFunction, Name: name}, nil
	case ToolChoiceMCP:
		if w.ServerLabel == "" {
			return ToolChoice{}, &Error{Code: "missing_required_parameter", Param: param + ".server_label", Message: "an mcp tool_choice needs server_label"}
		}
		return ToolChoice{Mode: ToolChoiceMCP, Name: w.Name, ServerLabel: w.ServerLabel}, nil
	}
	return ToolChoice{}, &Error{Code: "invalid_value", Param: param + ".type", Message: fmt.Sprintf("unsupported tool_choice type %q (function or mcp)", w.Type)}
}

func isNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

// decodeFunctionCallOutput reads a function_call_output item: call_id (required) and output
// (a string; may be empty).
func decodeFunctionCallOutput(c *ConversationItemCreate, it map[string]json.RawMessage, werr func(code, param, format string, a ...any) *Error) (ClientEvent, *Error) {
	c.ItemType = "function_call_output"
	id, ok, e := str(it, "call_id")
	if e != nil || !ok || id == "" {
		return nil, werr("missing_required_parameter", "item.call_id", "missing required parameter 'item.call_id' (the call_id of the function_call it answers)")
	}
	c.CallID = id
	out, ok, e := str(it, "output")
	if e != nil {
		return nil, werr("invalid_type", "item.output", "'item.output' must be a string")
	}
	if !ok {
		return nil, werr("missing_required_parameter", "item.output", "missing required parameter 'item.output' (a string, may be empty)")
	}
	c.Output = out
	return c, nil
}
