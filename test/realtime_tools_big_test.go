package test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBigFunctionCallOutputEcho: a 10 MB function_call_output (under the 15 MiB event bound) is
// refused at admission (it cannot fit the model's context window: docs/SECURITY.md), never
// echoed nor prefilled, and the session lives on; the call's real output is then accepted and
// echoed as OpenAI echoes it (conversation.item.added and .done, each with the whole output). At
// 7161a1b the two echoes of the 10 MB item overflowed the 16 MiB outbound budget and the server
// closed the session as a slow client; before admission its prefill cost minutes of CPU.
func TestBigFunctionCallOutputEcho(t *testing.T) {
	t.Parallel()
	_, c := startToolSession(t, nil, nil)
	tool := map[string]any{"type": "function", "name": "fetch_report", "parameters": map[string]any{"type": "object",
		"properties": map[string]any{"id": map[string]any{"type": "string"}}, "required": []any{"id"}}}
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "output_modalities": []any{"text"},
		"tools": []any{tool}, "tool_choice": "required", "audio": map[string]any{"input": map[string]any{"turn_detection": nil}}}})
	c.until(t, "session.updated")
	c.send(t, textItem("Fetch report 7."))
	c.send(t, map[string]any{"type": "response.create"})
	done, _ := c.until(t, "response.done")
	var callID string
	for _, o := range done["response"].(map[string]any)["output"].([]any) {
		if it := o.(map[string]any); it["type"] == "function_call" {
			callID, _ = it["call_id"].(string)
		}
	}
	require.NotEmpty(t, callID, "%v", done)

	c.send(t, map[string]any{"type": "conversation.item.create", "event_id": "ev_big", "item": map[string]any{
		"type": "function_call_output", "call_id": callID, "output": strings.Repeat("r", 10<<20)}})
	e, _ := c.until(t, "error")
	require.Equal(t, "string_above_max_length", e["error"].(map[string]any)["code"], "%v", e)
	require.Equal(t, "item.output", e["error"].(map[string]any)["param"], "%v", e)
	require.Equal(t, "ev_big", e["error"].(map[string]any)["event_id"], "%v", e)

	output := strings.Repeat("report seven is fine ", 200)
	c.send(t, map[string]any{"type": "conversation.item.create", "item": map[string]any{
		"type": "function_call_output", "call_id": callID, "output": output}})
	for _, typ := range []string{"conversation.item.added", "conversation.item.done"} {
		ev, _ := c.until(t, typ)
		it := ev["item"].(map[string]any)
		require.Equal(t, "function_call_output", it["type"], typ)
		require.Len(t, it["output"], len(output), "%s carries the whole output", typ)
	}
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "instructions": "still here"}})
	upd, _ := c.until(t, "session.updated")
	require.Equal(t, "still here", upd["session"].(map[string]any)["instructions"])
}
