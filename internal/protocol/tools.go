package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/omniserve/omniserve/internal/jsonbound"
)

// Tool is a function tool of session.tools or response.create tools: {type: "function", name,
// description, parameters} (the realtime shape, GA and beta alike). Parameters is its
// arguments' JSON schema (nil: none).
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// ToolChoice is tool_choice: Mode "auto", "none", "required", "function" with Function the
// forced function's name, or "mcp" with ServerLabel and (optionally) Function the forced MCP
// tool's name.
type ToolChoice struct {
	Mode        string
	Function    string
	ServerLabel string
}

// decodeTools reads a tools array; param names it in errors ("session.tools"). MCP tools are
// accepted where allowMCP (session.update); response.create refuses them.
func decodeTools(raw json.RawMessage, param string, allowMCP bool) ([]Tool, []MCPTool, *Error) {
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, nil, &Error{Code: "invalid_type", Param: param, Message: "tools must be an array of tool objects"}
	}
	out := make([]Tool, 0, len(items))
	var mcp []MCPTool
	for i, it := range items {
		p := fmt.Sprintf("%s[%d]", param, i)
		typ, _, _ := str(it, "type")
		switch typ {
		case "function":
		case "mcp":
			if !allowMCP {
				return nil, nil, &Error{Code: "unsupported_tools", Param: p + ".type", Message: "MCP tools are declared in session.update (session.tools), not per response"}
			}
			m, e := decodeMCPTool(it, p, i)
			if e != nil {
				return nil, nil, e
			}
			mcp = append(mcp, m)
			continue
		case "":
			return nil, nil, &Error{Code: "missing_required_parameter", Param: p + ".type", Message: "each tool needs type \"function\" or \"mcp\""}
		default:
			return nil, nil, &Error{Code: "invalid_value", Param: p + ".type", Message: fmt.Sprintf("unknown tool type %q (function or mcp)", typ)}
		}
		name, ok, e := str(it, "name")
		if e != nil || !ok || name == "" {
			return nil, nil, &Error{Code: "missing_required_parameter", Param: p + ".name", Message: "a function tool needs a name"}
		}
		desc, _, e := str(it, "description")
		if e != nil {
			return nil, nil, &Error{Code: "invalid_type", Param: p + ".description", Message: "description must be a string"}
		}
		t := Tool{Name: name, Description: desc}
		if v, ok := it["parameters"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			// Bounded before anything recursive reads it: the tool grammar's walk decodes the
			// whole schema before it looks at its depth.
			if err := jsonbound.Check(v, jsonbound.Schema); err != nil {
				return nil, nil, &Error{Code: "invalid_value", Param: p + ".parameters", Message: fmt.Sprintf("Invalid schema for '%s.parameters': %v", p, err)}
			}
			if !json.Valid(v) || bytes.TrimSpace(v)[0] != '{' {
				return nil, nil, &Error{Code: "invalid_value", Param: p + ".parameters", Message: "parameters must be a JSON schema object"}
			}
			t.Parameters = v
		}
		out = append(out, t)
	}
	return out, mcp, nil
}

// decodeToolChoice reads tool_choice: a mode string, or {type: "function", name} (also the
// chat shape {type: "function", function: {name}}).
func decodeToolChoice(raw json.RawMessage, param string) (*ToolChoice, *Error) {
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		switch mode {
		case "auto", "none", "required":
			return &ToolChoice{Mode: mode}, nil
		}
		return nil, &Error{Code: "invalid_value", Param: param, Message: fmt.Sprintf("tool_choice %q must be auto, none, required or {\"type\": \"function\", \"name\": …}", mode)}
	}
	var obj struct {
		Type     string `json:"type"`
		Name     string `json:"name"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, &Error{Code: "invalid_type", Param: param, Message: "tool_choice must be a string or an object"}
	}
	if obj.Type == "mcp" {
		return decodeMCPToolChoice(raw, param)
	}
	if obj.Type != "function" {
		return nil, &Error{Code: "invalid_value", Param: param + ".type", Message: fmt.Sprintf("tool_choice type %q must be \"function\" or \"mcp\"", obj.Type)}
	}
	name := obj.Name
	if name == "" && obj.Function != nil {
		name = obj.Function.Name
	}
	if name == "" {
		return nil, &Error{Code: "missing_required_parameter", Param: param + ".name", Message: "tool_choice of type function needs the function's name"}
	}
	return &ToolChoice{Mode: "function", Function: name}, nil
}
