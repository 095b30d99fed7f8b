package test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRealtimeFunctionCallItemCreate: a client rebuilding a conversation's history creates the
// model's earlier function_call item, then its function_call_output, as OpenAI accepts
// (issue 40): both are added, the next response answers with them in the prompt, and a call
// without a name, with arguments that are not JSON, or repeating a call_id, is refused naming
// the parameter while the session goes on.
func TestRealtimeFunctionCallItemCreate(t *testing.T) {
	t.Parallel()
	_, c := startToolSession(t, nil, nil)
	tool := map[string]any{"type": "function", "name": "get_weather", "parameters": map[string]any{"type": "object",
		"properties": map[string]any{"city": map[string]any{"type": "string"}}}}
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "output_modalities": []any{"text"},
		"tools": []any{tool}, "max_output_tokens": 8, "audio": map[string]any{"input": map[string]any{"turn_detection": nil}}}})
	c.until(t, "session.updated")

	c.send(t, textItem("What is the weather in Paris?"))
	c.until(t, "conversation.item.done")
	call := map[string]any{"type": "conversation.item.create", "item": map[string]any{
		"type": "function_call", "call_id": "call_restored_1", "name": "get_weather", "arguments": `{"city":"Paris"}`}}
	c.send(t, call)
	for _, typ := range []string{"conversation.item.added", "conversation.item.done"} {
		ev, _ := c.until(t, typ)
		it := ev["item"].(map[string]any)
		require.Equal(t, "function_call", it["type"], typ)
		require.Equal(t, "call_restored_1", it["call_id"])
		require.Equal(t, "get_weather", it["name"])
		require.JSONEq(t, `{"city":"Paris"}`, it["arguments"].(string))
	}

	for _, tc := range []struct {
		name  string
		item  map[string]any
		param string
	}{
		{"the same call_id again", call["item"].(map[string]any), "item.call_id"},
		{"no name", map[string]any{"type": "function_call", "call_id": "call_2", "arguments": "{}"}, "item.name"},
		{"no call_id", map[string]any{"type": "function_call", "name": "get_weather"}, "item.call_id"},
		{"arguments not JSON", map[string]any{"type": "function_call", "call_id": "call_3", "name": "get_weather", "arguments": "{city"}, "item.arguments"},
	} {
		c.send(t, map[string]any{"type": "conversation.item.create", "event_id": "ev_" + tc.param, "item": tc.item})
		ev, _ := c.until(t, "error")
		require.Equal(t, tc.param, ev["error"].(map[string]any)["param"], tc.name)
	}

	c.send(t, map[string]any{"type": "conversation.item.create", "item": map[string]any{
		"type": "function_call_output", "call_id": "call_restored_1", "output": `{"temperature_c":18}`}})
	c.until(t, "conversation.item.done")
	c.send(t, map[string]any{"type": "response.create"})
	done, _ := c.until(t, "response.done")
	resp := done["response"].(map[string]any)
	require.Contains(t, []string{"completed", "incomplete"}, resp["status"], "%v", resp)
	withCall := resp["usage"].(map[string]any)["input_tokens"].(float64)

	// The same question without the restored call: the call and its output were in the prompt.
	_, c2 := startToolSession(t, nil, nil)
	c2.send(t, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "output_modalities": []any{"text"},
		"tools": []any{tool}, "max_output_tokens": 8, "audio": map[string]any{"input": map[string]any{"turn_detection": nil}}}})
	c2.until(t, "session.updated")
	c2.send(t, textItem("What is the weather in Paris?"))
	c2.until(t, "conversation.item.done")
	c2.send(t, map[string]any{"type": "response.create"})
	done2, _ := c2.until(t, "response.done")
	without := done2["response"].(map[string]any)["usage"].(map[string]any)["input_tokens"].(float64)
	require.Greater(t, withCall, without+10, "the restored call and its output reached the model")
}

// TestRealtimeHistoryBurst: a client restoring a conversation sends its items back to back,
// one event each (GPT-Live's start carries up to 128): every one is added, none refused for a
// full engine queue, and the next response reads them all.
func TestRealtimeHistoryBurst(t *testing.T) {
	t.Parallel()
	_, c := startToolSession(t, nil, nil)
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "output_modalities": []any{"text"},
		"max_output_tokens": 8, "audio": map[string]any{"input": map[string]any{"turn_detection": nil}}}})
	c.until(t, "session.updated")
	const items = 48
	for i := range items {
		c.send(t, textItem(fmt.Sprintf("turn %d", i)))
	}
	for range items {
		c.until(t, "conversation.item.done")
	}
	c.send(t, map[string]any{"type": "response.create"})
	done, _ := c.until(t, "response.done")
	require.Contains(t, []string{"completed", "incomplete"}, done["response"].(map[string]any)["status"]) // until fails on any error
}
