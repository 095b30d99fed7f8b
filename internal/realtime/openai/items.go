package openai

import (
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// Item is it as the protocol describes it, in GA spelling (output_audio / output_text parts;
// protocol.Encode spells them audio / text for beta clients).
func Item(it session.Item) protocol.Item {
	switch it.Type {
	case "function_call":
		return protocol.FunctionCallItem(it.ID, it.Status, it.CallID, it.Name, it.Arguments)
	case "mcp_list_tools":
		return protocol.Item{ID: it.ID, Type: it.Type, Open: mcpListItem(it)}
	case "mcp_call", "mcp_approval_request", "mcp_approval_response":
		return protocol.Item{ID: it.ID, Type: it.Type, Open: mcpItem(it)}
	case "function_call_output":
		return protocol.FunctionCallOutputItem(it.ID, it.Status, it.CallID, it.Output)
	}
	var part protocol.ContentPart
	switch {
	case it.Role == "assistant" && it.Audio:
		part = protocol.AudioPart("output_audio", it.Text)
	case it.Role == "assistant":
		part = protocol.TextPart("output_text", it.Text)
	case it.Audio:
		part = protocol.InputAudioPart(it.Transcript)
	default:
		part = protocol.TextPart("input_text", it.Text)
	}
	w := protocol.MessageItem(it.ID, it.Role, it.Status, part)
	if it.EmptyContent {
		w.Content = []protocol.ContentPart{}
	}
	return w
}

// Items is every item of items, in order.
func Items(items []session.Item) []protocol.Item {
	out := make([]protocol.Item, 0, len(items))
	for _, it := range items {
		out = append(out, Item(it))
	}
	return out
}

// rawJSON is JSON kept as written (a tool's schema) in an item's fields.
type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }

// mcpListItem is an mcp_list_tools item (these items are written as maps: their keys sort as
// the typed items' do).
func mcpListItem(it session.Item) map[string]any {
	tools := make([]any, 0, len(it.MCPTools))
	for _, t := range it.MCPTools {
		w := map[string]any{"name": t.Name, "input_schema": rawJSON(t.InputSchema)}
		if t.Description != "" {
			w["description"] = t.Description
		}
		if len(t.Annotations) > 0 {
			w["annotations"] = rawJSON(t.Annotations)
		}
		tools = append(tools, w)
	}
	return map[string]any{"id": it.ID, "object": "realtime.item", "type": it.Type, "server_label": it.ServerLabel, "tools": tools}
}

// mcpItem is an mcp_call, mcp_approval_request or mcp_approval_response item.
func mcpItem(it session.Item) map[string]any {
	w := map[string]any{"id": it.ID, "object": "realtime.item", "type": it.Type}
	m := it.MCP
	switch it.Type {
	case "mcp_call":
		var out, errw, appr any
		if m.Output != nil {
			out = *m.Output
		}
		if m.Error != nil {
			errw = m.Error
		}
		if m.ApprovalRequestID != "" {
			appr = m.ApprovalRequestID
		}
		w["status"], w["server_label"], w["name"], w["arguments"] = it.Status, it.ServerLabel, it.Name, it.Arguments
		w["output"], w["error"], w["approval_request_id"] = out, errw, appr
	case "mcp_approval_request":
		w["server_label"], w["name"], w["arguments"] = it.ServerLabel, it.Name, it.Arguments
	case "mcp_approval_response":
		var reason any
		if m.Reason != "" {
			reason = m.Reason
		}
		w["approval_request_id"], w["approve"], w["reason"] = m.ApprovalRequestID, m.Approve, reason
	}
	return w
}
