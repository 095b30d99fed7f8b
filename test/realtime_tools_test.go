package test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRealtimeFunctionTools drives a tool round trip as the realtime protocol documents it,
// over a plain WebSocket: a session with a function tool, a forced call (the documented event
// sequence, arguments valid against the schema, nothing of the call spoken or sent as text),
// the client's function_call_output and a response.create that continues from it, and the
// refusals (an unknown call_id, a tool_choice naming no tool, MCP tools).
func TestRealtimeFunctionTools(t *testing.T) {
	s, c := startToolSession(t, nil, nil, "--log-stats")
	until := func(typ string) (map[string]any, []map[string]any) { t.Helper(); return c.until(t, typ) }
	tool := map[string]any{"type": "function", "name": "lookup_order", "description": "Look up an order",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"order_id": map[string]any{"type": "string"},
			"rush": map[string]any{"type": "boolean"}}, "required": []any{"order_id"}}}

	// Refusals first: each names its parameter, and the session lives on.
	c.send(t, map[string]any{"type": "session.update", "event_id": "e1", "session": map[string]any{"type": "realtime",
		"tools": []any{tool}, "tool_choice": map[string]any{"type": "function", "name": "nope"}}})
	e, _ := until("error")
	require.Equal(t, "session.tool_choice", e["error"].(map[string]any)["param"])
	c.send(t, map[string]any{"type": "session.update", "event_id": "e2", "session": map[string]any{"type": "realtime",
		"tools": []any{map[string]any{"type": "mcp", "server_label": "x", "server_url": "http://127.0.0.1:1"}}}})
	e, _ = until("error")
	require.Equal(t, "mcp_server_not_allowed", e["error"].(map[string]any)["code"]) // no --mcp-allowed-urls
	c.send(t, map[string]any{"type": "conversation.item.create", "event_id": "e3", "item": map[string]any{
		"type": "function_call_output", "call_id": "call_nope", "output": "x"}})
	e, _ = until("error")
	require.Equal(t, "item.call_id", e["error"].(map[string]any)["param"])

	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "output_modalities": []any{"audio"},
		"tools": []any{tool}, "tool_choice": "required", "audio": map[string]any{"input": map[string]any{"turn_detection": nil}}}})
	upd, _ := until("session.updated")
	sess := upd["session"].(map[string]any)
	require.Equal(t, "required", sess["tool_choice"])
	require.Equal(t, "lookup_order", sess["tools"].([]any)[0].(map[string]any)["name"])

	c.send(t, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": "Where is order 42?"}}}})
	// The session forces a call: a response whose own max_output_tokens cannot hold it is refused
	// naming that parameter (at 7161a1b it failed later as an engine_error).
	c.send(t, map[string]any{"type": "response.create", "event_id": "e4", "response": map[string]any{"max_output_tokens": 2}})
	e, _ = until("error")
	require.Equal(t, "invalid_value", e["error"].(map[string]any)["code"], "%v", e)
	require.Equal(t, "response.max_output_tokens", e["error"].(map[string]any)["param"], "%v", e)
	require.Equal(t, "e4", e["error"].(map[string]any)["event_id"], "%v", e)
	c.send(t, map[string]any{"type": "response.create"})
	done, seen := until("response.done")
	var order []string
	var args map[string]any
	var callID string
	for _, ev := range seen {
		typ := ev["type"].(string)
		switch typ {
		case "response.output_item.added", "response.output_item.done", "conversation.item.added", "conversation.item.done":
			if it, _ := ev["item"].(map[string]any); it["type"] == "function_call" {
				order = append(order, typ)
				callID, _ = it["call_id"].(string)
			}
		case "response.function_call_arguments.delta":
			order = append(order, typ)
		case "response.function_call_arguments.done":
			order = append(order, typ)
			require.Equal(t, "lookup_order", ev["name"])
			require.NoError(t, json.Unmarshal([]byte(ev["arguments"].(string)), &args), "%v", ev["arguments"])
		case "response.output_audio_transcript.delta", "response.output_text.delta":
			d, _ := ev["delta"].(string)
			require.NotContains(t, d, "tool_call", "call markup is never sent as text")
		}
	}
	require.Equal(t, []string{"response.output_item.added", "conversation.item.added", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "conversation.item.done", "response.output_item.done"}, order)
	require.IsType(t, "", args["order_id"], "arguments match the schema: %v", args)
	require.NotEmpty(t, callID)
	resp := done["response"].(map[string]any)
	require.Equal(t, "completed", resp["status"])
	var calls int
	for _, o := range resp["output"].([]any) {
		if o.(map[string]any)["type"] == "function_call" {
			calls++
			require.Equal(t, callID, o.(map[string]any)["call_id"])
		}
	}
	require.Equal(t, 1, calls, "response.done carries the call")

	// The client runs the function and answers; the conversation continues from the result.
	c.send(t, map[string]any{"type": "conversation.item.create", "item": map[string]any{
		"type": "function_call_output", "call_id": callID, "output": `{"status":"shipped"}`}})
	added, _ := until("conversation.item.added")
	require.Equal(t, "function_call_output", added["item"].(map[string]any)["type"])
	c.send(t, map[string]any{"type": "response.create", "response": map[string]any{"tool_choice": "none", "max_output_tokens": 16}})
	done, seen = until("response.done")
	// A spoken reply: it ends by itself (the dummy's 8-32 words) or at its 16 tokens.
	require.Contains(t, []any{"completed", "incomplete"}, done["response"].(map[string]any)["status"], "a spoken reply")
	out := done["response"].(map[string]any)["usage"].(map[string]any)["output_token_details"].(map[string]any)["text_tokens"].(float64)
	require.LessOrEqual(t, out, 16.0, "max_output_tokens bounds the reply")
	var spoken strings.Builder
	for _, ev := range seen {
		if ev["type"] == "response.output_audio_transcript.delta" {
			spoken.WriteString(ev["delta"].(string))
		}
	}
	require.NotEmpty(t, spoken.String(), "the reply after the tool result is spoken")
	_, metrics := s.get(t, "/metrics")
	require.Regexp(t, `omniserve_duplex_turns_total\{dialect="openai",finished_reason="tool_calls",model_name="[^"]*"\} 1\b`, string(metrics),
		"the turn that ended in a call is finalized with reason tool_calls")
}
