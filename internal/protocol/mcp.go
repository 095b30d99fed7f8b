package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
)

// MCPTool is a `type: "mcp"` entry of session.tools: a remote MCP server the server itself
// connects to. Headers and Authorization are the client's secrets: never logged, never echoed.
type MCPTool struct {
	// Index is the entry's position in the tools array, for error params.
	Index             int
	ServerLabel       string
	ServerURL         string
	ServerDescription string
	Headers           map[string]string
	Authorization     string
	// AllowedTools is allowed_tools as sent (an array of names, {tool_names, read_only} or
	// absent); the session parses it. RequireApproval likewise (absent = "always").
	AllowedTools    json.RawMessage
	RequireApproval json.RawMessage
}

var serverLabelRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

func decodeMCPTool(it map[string]json.RawMessage, p string, index int) (MCPTool, *Error) {
	m := MCPTool{Index: index}
	label, ok, e := str(it, "server_label")
	if e != nil || !ok || label == "" {
		return m, &Error{Code: "missing_required_parameter", Param: p + ".server_label", Message: "an mcp tool needs a server_label"}
	}
	if !serverLabelRE.MatchString(label) {
		return m, &Error{Code: "invalid_value", Param: p + ".server_label", Message: fmt.Sprintf("invalid server_label %q: 1 to 64 characters of a-z, A-Z, 0-9, _ and -", label)}
	}
	m.ServerLabel = label
	for _, k := range []string{"connector_id", "tunnel_id"} {
		if v, ok := it[k]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return m, &Error{Code: "unsupported_tools", Param: p + "." + k, Message: k + " names an OpenAI-hosted connector; this server reaches MCP servers by server_url only"}
		}
	}
	url, ok, e := str(it, "server_url")
	if e != nil {
		return m, &Error{Code: "invalid_type", Param: p + ".server_url", Message: "server_url must be a string"}
	}
	if !ok || url == "" {
		return m, &Error{Code: "missing_required_parameter", Param: p + ".server_url", Message: "an mcp tool needs a server_url"}
	}
	m.ServerURL = url
	if m.ServerDescription, _, e = str(it, "server_description"); e != nil {
		return m, &Error{Code: "invalid_type", Param: p + ".server_description", Message: "server_description must be a string"}
	}
	if m.Authorization, _, e = str(it, "authorization"); e != nil {
		return m, &Error{Code: "invalid_type", Param: p + ".authorization", Message: "authorization must be a string"}
	}
	if v, ok := it["headers"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		if err := json.Unmarshal(v, &m.Headers); err != nil {
			return m, &Error{Code: "invalid_type", Param: p + ".headers", Message: "headers must be an object of strings"}
		}
	}
	if v, ok := it["allowed_tools"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		m.AllowedTools = v
	}
	if v, ok := it["require_approval"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		m.RequireApproval = v
	}
	return m, nil
}

// decodeMCPToolChoice reads tool_choice {type: "mcp", server_label, name?}: a call of the
// named tool of that server is forced (without a name: a call of any of its tools).
func decodeMCPToolChoice(raw json.RawMessage, param string) (*ToolChoice, *Error) {
	var obj struct {
		ServerLabel *string `json:"server_label"`
		Name        *string `json:"name"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, &Error{Code: "invalid_type", Param: param, Message: "tool_choice {type: \"mcp\"} needs server_label (a string) and an optional name (a string)"}
	}
	if obj.ServerLabel == nil || *obj.ServerLabel == "" {
		return nil, &Error{Code: "missing_required_parameter", Param: param + ".server_label", Message: "tool_choice of type mcp needs the server_label of a session MCP tool"}
	}
	tc := &ToolChoice{Mode: "mcp", ServerLabel: *obj.ServerLabel}
	if obj.Name != nil {
		tc.Function = *obj.Name
	}
	return tc, nil
}

// decodeApprovalResponse reads an mcp_approval_response item of conversation.item.create: the
// client's answer to an mcp_approval_request (approve, and an optional reason).
func decodeApprovalResponse(c *ConversationItemCreate, it map[string]json.RawMessage) (ClientEvent, *Error) {
	c.ItemType = "mcp_approval_response"
	id, ok, e := str(it, "approval_request_id")
	if e != nil || !ok || id == "" {
		return nil, &Error{Code: "missing_required_parameter", Param: "item.approval_request_id", Message: "an mcp_approval_response item needs the approval_request_id of the mcp_approval_request it answers"}
	}
	v, ok := it["approve"]
	if !ok {
		return nil, &Error{Code: "missing_required_parameter", Param: "item.approve", Message: "an mcp_approval_response item needs approve (true or false)"}
	}
	if err := json.Unmarshal(v, &c.Approve); err != nil {
		return nil, &Error{Code: "invalid_type", Param: "item.approve", Message: "approve must be true or false"}
	}
	if c.Reason, _, e = str(it, "reason"); e != nil {
		return nil, &Error{Code: "invalid_type", Param: "item.reason", Message: "reason must be a string"}
	}
	c.ApprovalRequestID = id
	return c, nil
}
