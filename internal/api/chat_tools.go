package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/jsonbound"
	"github.com/omniserve/omniserve/internal/oaierror"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// chatTool is one entry of tools: {type: "function", function: {name, description, parameters,
// strict}}. Custom tools (free-form input) have no schema to follow and are refused.
type chatTool struct {
	Type     string `json:"type"`
	Function *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"function"`
}

// chatToolCall is a call in an assistant message (request) or in a response message.
type chatToolCall struct {
	ID       string           `json:"id"`
	Type     string           `json:"type"`
	Function chatToolFunction `json:"function"`
}

type chatToolFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// chatToolCallDelta is a streamed call fragment: the first chunk of an index carries id, type
// and the name; later ones argument fragments.
type chatToolCallDelta struct {
	Index    int                   `json:"index"`
	ID       string                `json:"id,omitempty"`
	Type     string                `json:"type,omitempty"`
	Function chatToolFunctionDelta `json:"function"`
}

type chatToolFunctionDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// toolNameRE is OpenAI's function name rule.
var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// checkChatTools reads tools, tool_choice and parallel_tool_calls into out.Req.Tools. Call
// after checkChatSampling (the forced call's bound is max_tokens).
func checkChatTools(in *chatRequestBody, out *chatParsed) *oaierror.Error {
	hasTools := chatRawSet(in.Tools)
	if !hasTools {
		if chatRawSet(in.ToolChoice) {
			return oaierror.BadRequest("tool_choice", "invalid_value", "tool_choice is only allowed when tools are specified")
		}
		return nil
	}
	var tools []chatTool
	if err := json.Unmarshal(in.Tools, &tools); err != nil {
		return oaierror.BadRequest("tools", "invalid_type", "tools must be an array of {type: \"function\", function: {...}} objects")
	}
	spec := duplex.ToolSpec{Choice: duplex.ToolChoiceAuto, Parallel: true}
	if in.ParallelToolCalls != nil {
		spec.Parallel = *in.ParallelToolCalls
	}
	seen := map[string]int{}
	for i, t := range tools {
		param := fmt.Sprintf("tools[%d]", i)
		switch t.Type {
		case "function":
		case "custom":
			return oaierror.BadRequest(param+".type", "unsupported_value", "custom tools are not supported by this server; use type \"function\"")
		case "":
			return oaierror.BadRequest(param+".type", "missing_required_parameter", "each tool needs type \"function\"")
		default:
			return oaierror.BadRequest(param+".type", "invalid_value", fmt.Sprintf("unknown tool type %q; use \"function\"", t.Type))
		}
		f := t.Function
		if f == nil {
			return oaierror.BadRequest(param+".function", "missing_required_parameter", "a function tool needs function: {name, parameters}")
		}
		if !toolNameRE.MatchString(f.Name) {
			return oaierror.BadRequest(param+".function.name", "invalid_value",
				fmt.Sprintf("Invalid function name %q: it must be 1 to 64 characters of a-z, A-Z, 0-9, underscores and dashes", f.Name))
		}
		if j, dup := seen[f.Name]; dup {
			return oaierror.BadRequest(param+".function.name", "invalid_value",
				fmt.Sprintf("Duplicate function name %q: tools[%d] has it too; tool names must be unique", f.Name, j))
		}
		seen[f.Name] = i
		tool := duplex.Tool{Name: f.Name, Description: f.Description}
		if chatRawSet(f.Parameters) {
			if e := checkSchemaBound(param+".function.parameters", f.Parameters); e != nil {
				return e
			}
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(f.Parameters, &obj); err != nil {
				return oaierror.BadRequest(param+".function.parameters", "invalid_value", "parameters must be a JSON schema object")
			}
			if typ, ok := obj["type"]; ok && strings.TrimSpace(string(typ)) != `"object"` {
				return oaierror.BadRequest(param+".function.parameters", "invalid_value",
					fmt.Sprintf("Invalid schema for function %q: the parameters schema must have type \"object\", got %s", f.Name, typ))
			}
			tool.Parameters = f.Parameters
		}
		if err := requestclient.CheckTools(duplex.ToolSpec{Tools: []duplex.Tool{tool}}, out.Req.MaxTokens); err != nil {
			return oaierror.BadRequest(param+".function.parameters", "invalid_value", fmt.Sprintf("Invalid schema for function %q: %v", f.Name, err))
		}
		spec.Tools = append(spec.Tools, tool)
	}
	if e := parseToolChoice(in.ToolChoice, seen, &spec); e != nil {
		return e
	}
	if spec.Choice == duplex.ToolChoiceRequired || spec.Choice == duplex.ToolChoiceFunction {
		if out.Req.Sampling.Grammar != "" {
			return oaierror.BadRequest("tool_choice", "invalid_value", "a forced tool call cannot be combined with response_format json_object or json_schema")
		}
		if err := requestclient.CheckTools(spec, out.Req.MaxTokens); err != nil {
			if errors.Is(err, duplex.ErrToolBudget) {
				return oaierror.BadRequest("max_tokens", "invalid_value", fmt.Sprintf("max_tokens %d is too small for a complete call of the forced tool: %v", out.Req.MaxTokens, err))
			}
			return oaierror.BadRequest("tools", "invalid_value", err.Error())
		}
	}
	out.Req.Tools = &spec
	return nil
}

// checkSchemaBound refuses a client's JSON schema over jsonbound.Schema before anything
// recursive reads it: llama.cpp's schema_to_grammar (cgo) overflows its C stack on a schema a
// few thousand levels deep, killing the process, and the stage's grammar walk decodes the
// whole schema before it looks at its depth.
func checkSchemaBound(param string, schema json.RawMessage) *oaierror.Error {
	if err := jsonbound.Check(schema, jsonbound.Schema); err != nil {
		return oaierror.BadRequest(param, "invalid_value", fmt.Sprintf("Invalid schema for '%s': %v", param, err))
	}
	return nil
}

// parseToolChoice reads none | auto | required | {type: "function", function: {name}}.
func parseToolChoice(raw json.RawMessage, names map[string]int, spec *duplex.ToolSpec) *oaierror.Error {
	if !chatRawSet(raw) {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case duplex.ToolChoiceNone, duplex.ToolChoiceAuto, duplex.ToolChoiceRequired:
			spec.Choice = s
			return nil
		}
		return oaierror.BadRequest("tool_choice", "invalid_value", fmt.Sprintf("Invalid tool_choice %q: use \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}", s))
	}
	var obj struct {
		Type     string `json:"type"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return oaierror.BadRequest("tool_choice", "invalid_type", "tool_choice must be a string or an object")
	}
	if obj.Type != "function" {
		return oaierror.BadRequest("tool_choice.type", "invalid_value", fmt.Sprintf("unsupported tool_choice type %q; use \"function\"", obj.Type))
	}
	if obj.Function == nil || obj.Function.Name == "" {
		return oaierror.BadRequest("tool_choice.function.name", "missing_required_parameter", "tool_choice needs function.name")
	}
	if _, ok := names[obj.Function.Name]; !ok {
		return oaierror.BadRequest("tool_choice", "invalid_value",
			fmt.Sprintf("Invalid value for 'tool_choice': 'tool_choice' refers to function %q, which is not among the tools", obj.Function.Name))
	}
	spec.Choice, spec.Function = duplex.ToolChoiceFunction, obj.Function.Name
	return nil
}

// checkToolMessages pairs every tool message with a call of an earlier assistant message, as
// OpenAI does: a result without its call is a 400 naming the message.
func checkToolMessages(in []chatMessageBody, msgs []requestclient.ChatMessage) *oaierror.Error {
	calls := map[string]bool{}
	for i, m := range in {
		param := fmt.Sprintf("messages[%d]", i)
		for _, c := range msgs[i].ToolCalls {
			calls[c.ID] = true
		}
		if m.Role != "tool" {
			continue
		}
		if m.ToolCallID == "" {
			return oaierror.BadRequest(param+".tool_call_id", "missing_required_parameter", "a tool message needs tool_call_id")
		}
		if !calls[m.ToolCallID] {
			return oaierror.BadRequest(param+".tool_call_id", "invalid_value",
				fmt.Sprintf("Invalid parameter: messages with role 'tool' must be a response to a preceding message with 'tool_calls'; no earlier call has id %q", m.ToolCallID))
		}
	}
	return nil
}

// parseAssistantToolCalls reads an assistant message's tool_calls.
func parseAssistantToolCalls(raw json.RawMessage, param string) ([]duplex.ToolCall, *oaierror.Error) {
	var calls []chatToolCall
	if err := json.Unmarshal(raw, &calls); err != nil {
		return nil, oaierror.BadRequest(param, "invalid_type", "tool_calls must be an array of {id, type: \"function\", function: {name, arguments}}")
	}
	out := make([]duplex.ToolCall, len(calls))
	for j, c := range calls {
		pp := fmt.Sprintf("%s[%d]", param, j)
		if c.ID == "" {
			return nil, oaierror.BadRequest(pp+".id", "missing_required_parameter", "each tool call needs an id")
		}
		if c.Type != "" && c.Type != "function" {
			return nil, oaierror.BadRequest(pp+".type", "invalid_value", fmt.Sprintf("unsupported tool call type %q; use \"function\"", c.Type))
		}
		if c.Function.Name == "" {
			return nil, oaierror.BadRequest(pp+".function.name", "missing_required_parameter", "each tool call needs function.name")
		}
		out[j] = duplex.ToolCall{Index: j, ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments}
	}
	return out, nil
}

// wireToolCalls is a response message's tool_calls (nil when there are none).
func wireToolCalls(calls []duplex.ToolCall) []chatToolCall {
	if len(calls) == 0 {
		return nil
	}
	out := make([]chatToolCall, len(calls))
	for i, c := range calls {
		out[i] = chatToolCall{ID: c.ID, Type: "function", Function: chatToolFunction{Name: c.Name, Arguments: c.Arguments}}
	}
	return out
}

// toolCallDeltas are the streamed chunks of one complete call: the head (id, type, name, empty
// arguments), then its arguments.
func toolCallDeltas(c duplex.ToolCall) []chatToolCallDelta {
	return []chatToolCallDelta{
		{Index: c.Index, ID: c.ID, Type: "function", Function: chatToolFunctionDelta{Name: c.Name}},
		{Index: c.Index, Function: chatToolFunctionDelta{Arguments: c.Arguments}},
	}
}

func (h *chatHandler) countToolCall() {
	if h.cfg.CountToolCall != nil {
		h.cfg.CountToolCall("chat")
	}
}
