package test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Conversation integrity around a realtime function call on the real binary over a plain
// WebSocket client (docs/REALTIME.md, "Function tools"; TestRealtimeFunctionTools is the plain
// round trip): a forced call comes as a function_call item with the documented event sequence
// and schema-valid arguments (maxLength and enum kept); a second response.create while it runs
// is refused and the session lives on; a function_call_output for an unknown call_id is an
// error naming item.call_id; with a user message between the call and its output (the user
// spoke while the call was pending) the output still pairs with its call, and response.create
// continues the conversation from it. The turn that called is logged with reason tool_calls
// and counted in omniserve_tool_calls_total.
func TestRealtimeFunctionToolsIntegrity(t *testing.T) {
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--log-stats",
		"--log-format", "json", "--cache-dir", filepath.Join(t.TempDir(), "cache"))
	tool := map[string]any{"type": "function", "name": "lookup_order", "description": "Look up an order by its number.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{
			"order_number": map[string]any{"type": "string", "maxLength": 12},
			"priority":     map[string]any{"type": "string", "enum": []string{"low", "high"}}},
			"required": []string{"order_number", "priority"}, "additionalProperties": false}}
	c := dialRT(t, s, map[string]any{"turn_detection": nil, "output_modalities": []string{"audio"},
		"max_output_tokens": 200, "tools": []any{tool},
		"tool_choice": map[string]any{"type": "function", "name": "lookup_order"}})

	c.send(t, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": "Where is my order 42?"}}}})
	c.until(t, "conversation.item.done", 10*time.Second)
	c.send(t, map[string]any{"type": "response.create"})
	c.send(t, map[string]any{"type": "response.create", "event_id": "second"})
	evs := c.collectUntil(t, "response.done", 60*time.Second)

	var order []string
	var refused map[string]any
	for _, e := range evs {
		typ, _ := e["type"].(string)
		if typ == "error" {
			refused = e
			continue
		}
		order = append(order, typ)
	}
	require.NotNil(t, refused, "the second response.create is refused")
	errObj := refused["error"].(map[string]any)
	require.Equal(t, "response_already_active", errObj["code"], "vllm-omni's code on ?duplex=1 (OpenAI's conversation_already_has_active_response)")
	require.Equal(t, "second", errObj["event_id"])

	// The documented sequence of the call item, after the (empty) message item of the reply
	// (?duplex=1 speaks vllm-omni's dialect: an item added is also told as created).
	want := []string{"response.output_item.added", "conversation.item.added", "conversation.item.created", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "conversation.item.done", "response.output_item.done"}
	var callEvents []map[string]any
	for _, e := range evs {
		if it, ok := e["item"].(map[string]any); ok && it["type"] == "function_call" {
			callEvents = append(callEvents, e)
		} else if _, ok := e["call_id"]; ok {
			callEvents = append(callEvents, e)
		}
	}
	require.Len(t, callEvents, len(want), "events %v", order)
	for i, e := range callEvents {
		require.Equal(t, want[i], e["type"])
	}
	done := callEvents[4]
	require.Equal(t, "lookup_order", done["name"], "GA .done carries the name")
	callID, _ := done["call_id"].(string)
	require.Regexp(t, `^call_[0-9a-f]{24}$`, callID)
	var args map[string]any
	require.NoError(t, json.Unmarshal([]byte(done["arguments"].(string)), &args), done["arguments"])
	num, ok := args["order_number"].(string)
	require.True(t, ok, "order_number is a string: %v", args)
	require.LessOrEqual(t, len([]rune(num)), 12)
	require.Contains(t, []any{"low", "high"}, args["priority"])
	require.Len(t, args, 2, "no other properties")
	item := callEvents[5]["item"].(map[string]any)
	require.Equal(t, "completed", item["status"])
	require.Equal(t, done["arguments"], item["arguments"])

	resp := evs[len(evs)-1]["response"].(map[string]any)
	require.Equal(t, "completed", resp["status"])
	out := resp["output"].([]any)
	require.Len(t, out, 2)
	require.Equal(t, "function_call", out[1].(map[string]any)["type"])
	msg := out[0].(map[string]any)["content"].([]any)[0].(map[string]any)
	require.Empty(t, msg["transcript"], "the call's markup is never spoken")
	for _, typ := range order {
		require.NotEqual(t, "response.output_audio.delta", typ, "no audio for a reply that only calls")
	}
	rid := responseID(evs[len(evs)-1])
	require.Equal(t, "tool_calls", waitTurn(t, s, rid).reason)

	// An unknown call_id: an error naming the param; the session goes on.
	c.send(t, map[string]any{"type": "conversation.item.create", "event_id": "bad", "item": map[string]any{
		"type": "function_call_output", "call_id": "call_unknown", "output": "{}"}})
	e := c.until(t, "error", 10*time.Second)
	require.Equal(t, "item.call_id", e["error"].(map[string]any)["param"])
	require.Equal(t, "invalid_request_error", e["error"].(map[string]any)["type"])

	// The user speaks while the call is pending, then the result arrives and a response
	// continues from it (the response's own tool_choice none: it answers in words).
	c.send(t, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": "Is it there yet?"}}}})
	c.until(t, "conversation.item.done", 10*time.Second)
	c.send(t, map[string]any{"type": "conversation.item.create", "item": map[string]any{
		"type": "function_call_output", "call_id": callID, "output": `{"status":"shipped"}`}})
	added := c.until(t, "conversation.item.added", 10*time.Second)
	outItem := added["item"].(map[string]any)
	require.Equal(t, "function_call_output", outItem["type"])
	require.Equal(t, callID, outItem["call_id"])
	c.until(t, "conversation.item.done", 10*time.Second)
	c.send(t, map[string]any{"type": "conversation.item.create", "event_id": "again", "item": map[string]any{
		"type": "function_call_output", "call_id": callID, "output": "{}"}})
	e = c.until(t, "error", 10*time.Second)
	require.Equal(t, "item.call_id", e["error"].(map[string]any)["param"], "one output per call")

	c.send(t, map[string]any{"type": "response.create", "response": map[string]any{"tool_choice": "none", "max_output_tokens": 8}})
	evs = c.collectUntil(t, "response.done", 60*time.Second)
	resp = evs[len(evs)-1]["response"].(map[string]any)
	// ?duplex=1 speaks vllm-omni's dialect: completed (OpenAI's incomplete), with the same details.
	require.Equal(t, "completed", resp["status"], "8 tokens of words, no call: %v", resp["status_details"])
	require.Equal(t, "max_output_tokens", resp["status_details"].(map[string]any)["reason"])
	require.Len(t, resp["output"], 1, "no function_call item")

	// The session's choice back to auto; one response forces the call itself.
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"tool_choice": "auto"}})
	upd := c.until(t, "session.updated", 10*time.Second)
	require.Equal(t, "auto", upd["session"].(map[string]any)["tool_choice"])
	require.Len(t, upd["session"].(map[string]any)["tools"], 1)
	c.send(t, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": "And order 7?"}}}})
	c.until(t, "conversation.item.done", 10*time.Second)
	c.send(t, map[string]any{"type": "response.create", "response": map[string]any{
		"tool_choice": map[string]any{"type": "function", "name": "lookup_order"}}})
	done = c.until(t, "response.function_call_arguments.done", 60*time.Second)
	require.Equal(t, "lookup_order", done["name"])
	require.NoError(t, json.Unmarshal([]byte(done["arguments"].(string)), &args))
	resp = c.until(t, "response.done", 60*time.Second)["response"].(map[string]any)
	require.Equal(t, "completed", resp["status"])

	res, err := http.Get("http://" + s.addr + "/metrics") //nolint:noctx // bounded by the server under test
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, res.Body.Close())
	require.NoError(t, err)
	m := regexp.MustCompile(`omniserve_tool_calls_total\{api="realtime",model_name="[^"]*"\} (\d+)`).FindSubmatch(body)
	require.NotNil(t, m, "omniserve_tool_calls_total is exported")
	n, _ := strconv.Atoi(string(m[1]))
	require.Equal(t, 2, n)
	c.close(t)
}

// Session tools on a server-VAD turn the server takes by itself: the user's speech ends, the
// engine answers, and with tool_choice required the answer is a call (the stream's own tools,
// not response.create's).
func TestRealtimeToolsServerVAD(t *testing.T) {
	raw, err := os.ReadFile(goForwardRaw)
	require.NoError(t, err, "install pocketsphinx-testdata")
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	c := dialRT(t, s, map[string]any{"modalities": []string{"text"}, "max_response_output_tokens": 120,
		"turn_detection": map[string]any{"type": "server_vad", "create_response": true, "silence_duration_ms": 500},
		"tools": []any{map[string]any{"type": "function", "name": "move", "parameters": map[string]any{"type": "object",
			"properties": map[string]any{"meters": map[string]any{"type": "integer"}}, "required": []string{"meters"}}}},
		"tool_choice": "required"})
	c.stream(t, append(raw, make([]byte, 32000)...), 100*time.Millisecond)
	done := c.until(t, "response.function_call_arguments.done", 60*time.Second)
	require.Equal(t, "move", done["name"])
	var args map[string]any
	require.NoError(t, json.Unmarshal([]byte(done["arguments"].(string)), &args))
	_, ok := args["meters"].(float64)
	require.True(t, ok, "meters is a number: %v", args)
	resp := c.until(t, "response.done", 30*time.Second)["response"].(map[string]any)
	require.Equal(t, "completed", resp["status"])
	c.close(t)
}
