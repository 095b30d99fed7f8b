package test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBigFunctionCallOutputEcho: a 10 MB function_call_output (under the 15 MiB event bound) is
// echoed as OpenAI echoes it (conversation.item.added and .done, each with the whole output) to a
// client that reads, and the session lives on. At 7161a1b the two echoes overflowed the 16 MiB
// outbound budget and the server closed the session as a slow client.
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

	output := strings.Repeat("r", 10<<20)
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
