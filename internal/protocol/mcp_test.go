package protocol

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecodeMCPTools(t *testing.T) {
	ev, err := DecodeClientEvent([]byte(`{"type":"session.update","session":{"tools":[
		{"type":"function","name":"f"},
		{"type":"mcp","server_label":"calc","server_url":"http://127.0.0.1:8931/mcp","headers":{"X-A":"b"},
		 "authorization":"tok","allowed_tools":{"read_only":true},"require_approval":"never","server_description":"d"}]}}`))
	require.Nil(t, err)
	p := ev.(*SessionUpdate).Session
	require.True(t, p.ToolsSet)
	require.Equal(t, []Tool{{Name: "f"}}, p.Tools)
	require.Equal(t, []MCPTool{{Index: 1, ServerLabel: "calc", ServerURL: "http://127.0.0.1:8931/mcp", ServerDescription: "d",
		Headers: map[string]string{"X-A": "b"}, Authorization: "tok",
		AllowedTools: json.RawMessage(`{"read_only":true}`), RequireApproval: json.RawMessage(`"never"`)}}, p.MCPTools)

	for _, tc := range []struct{ name, tool, code, param string }{
		{"no label", `{"type":"mcp","server_url":"http://h/"}`, "missing_required_parameter", "session.tools[0].server_label"},
		{"bad label", `{"type":"mcp","server_label":"a b","server_url":"http://h/"}`, "invalid_value", "session.tools[0].server_label"},
		{"no url", `{"type":"mcp","server_label":"a"}`, "missing_required_parameter", "session.tools[0].server_url"},
		{"connector", `{"type":"mcp","server_label":"a","connector_id":"connector_gmail"}`, "unsupported_tools", "session.tools[0].connector_id"},
		{"headers not strings", `{"type":"mcp","server_label":"a","server_url":"http://h/","headers":{"x":1}}`, "invalid_type", "session.tools[0].headers"},
		{"authorization not a string", `{"type":"mcp","server_label":"a","server_url":"http://h/","authorization":7}`, "invalid_type", "session.tools[0].authorization"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeClientEvent([]byte(`{"type":"session.update","session":{"tools":[` + tc.tool + `]}}`))
			require.NotNil(t, err)
			require.Equal(t, tc.code, err.Code)
			require.Equal(t, tc.param, err.Param)
		})
	}
}

func TestDecodeMCPToolChoice(t *testing.T) {
	ev, err := DecodeClientEvent([]byte(`{"type":"response.create","response":{"tool_choice":{"type":"mcp","server_label":"calc","name":"add"}}}`))
	require.Nil(t, err)
	require.Equal(t, &ToolChoice{Mode: "mcp", ServerLabel: "calc", Function: "add"}, ev.(*ResponseCreate).ToolChoice)
	ev, err = DecodeClientEvent([]byte(`{"type":"session.update","session":{"tool_choice":{"type":"mcp","server_label":"calc"}}}`))
	require.Nil(t, err)
	require.Equal(t, &ToolChoice{Mode: "mcp", ServerLabel: "calc"}, ev.(*SessionUpdate).Session.ToolChoice)
	for _, tc := range []struct{ name, choice, code, param string }{
		{"no label", `{"type":"mcp","name":"add"}`, "missing_required_parameter", "session.tool_choice.server_label"},
		{"label not a string", `{"type":"mcp","server_label":7}`, "invalid_type", "session.tool_choice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeClientEvent([]byte(`{"type":"session.update","session":{"tool_choice":` + tc.choice + `}}`))
			require.NotNil(t, err)
			require.Equal(t, tc.code, err.Code)
			require.Equal(t, tc.param, err.Param)
		})
	}
}

func TestDecodeMCPApprovalResponse(t *testing.T) {
	ev, err := DecodeClientEvent([]byte(`{"type":"conversation.item.create","event_id":"e1","previous_item_id":"item_r","item":{
		"type":"mcp_approval_response","approval_request_id":"item_r","approve":true,"reason":"ok"}}`))
	require.Nil(t, err)
	c := ev.(*ConversationItemCreate)
	require.Equal(t, "mcp_approval_response", c.ItemType)
	require.Equal(t, "item_r", c.ApprovalRequestID)
	require.True(t, c.Approve)
	require.Equal(t, "ok", c.Reason)
	require.Equal(t, "item_r", c.PreviousItemID)
	for _, tc := range []struct{ name, item, code, param string }{
		{"no request id", `{"type":"mcp_approval_response","approve":true}`, "missing_required_parameter", "item.approval_request_id"},
		{"no approve", `{"type":"mcp_approval_response","approval_request_id":"r"}`, "missing_required_parameter", "item.approve"},
		{"approve not a bool", `{"type":"mcp_approval_response","approval_request_id":"r","approve":"yes"}`, "invalid_type", "item.approve"},
		{"reason not a string", `{"type":"mcp_approval_response","approval_request_id":"r","approve":false,"reason":1}`, "invalid_type", "item.reason"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeClientEvent([]byte(`{"type":"conversation.item.create","event_id":"e2","item":` + tc.item + `}`))
			require.NotNil(t, err)
			require.Equal(t, tc.code, err.Code)
			require.Equal(t, tc.param, err.Param)
			require.Equal(t, "e2", err.EventID)
		})
	}
}
