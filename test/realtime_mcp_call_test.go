package test

import (
	"encoding/json"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRealtimeMCPCalls drives MCP tool calls on the binary against real MCP servers on
// loopback (the official Go SDK): a forced call with the documented event sequence, its
// output in the item and a follow-up response the session starts by itself; allowed_tools
// respected on call; an approval (require_approval) approved and denied, and bad approval
// responses refused with their param; a server that dies mid-call failing the call with an
// error event while the session lives on; and the calls in the Prometheus families.
func TestRealtimeMCPCalls(t *testing.T) {
	ms := startMCPServer(t) // first: their cleanups run after the binary's
	dying := startMCPServer(t)
	s, c := startToolSession(t, nil, nil, "--mcp-allowed-urls", ms.url+","+dying.url)
	until := func(typ string) (map[string]any, []map[string]any) { t.Helper(); return c.until(t, typ) }
	errOf := func(ev map[string]any) map[string]any { return ev["error"].(map[string]any) }
	force := func(label, name string) map[string]any {
		return map[string]any{"type": "response.create", "response": map[string]any{
			"tool_choice": map[string]any{"type": "mcp", "server_label": label, "name": name}}}
	}
	ask := func(text string) {
		t.Helper()
		c.send(t, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
			"content": []any{map[string]any{"type": "input_text", "text": text}}}})
		until("conversation.item.done")
	}

	// Three servers: calc calls without approval; appr's echo (also calc's: the model sees it
	// as appr__echo) needs approval, as require_approval's "never" names only add; dying hangs.
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime",
		"output_modalities": []any{"text"}, "max_output_tokens": 160,
		"audio": map[string]any{"input": map[string]any{"turn_detection": nil}},
		"tools": []any{
			map[string]any{"type": "mcp", "server_label": "calc", "server_url": ms.url, "allowed_tools": []any{"add", "echo"}, "require_approval": "never"},
			map[string]any{"type": "mcp", "server_label": "appr", "server_url": ms.url, "allowed_tools": []any{"echo", "add"},
				"require_approval": map[string]any{"never": map[string]any{"tool_names": []any{"add"}}}},
			map[string]any{"type": "mcp", "server_label": "dying", "server_url": dying.url, "allowed_tools": []any{"hang"}, "require_approval": "never"},
		}}})
	until("session.updated")
	for range 3 {
		until("mcp_list_tools.completed")
	}

	// Refusals: each names its param; nothing reaches a server.
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{
		"tool_choice": map[string]any{"type": "mcp", "server_label": "nope"}}})
	e, _ := until("error")
	require.Equal(t, "session.tool_choice.server_label", errOf(e)["param"], "%v", e)
	ask("What is two plus three?")
	c.send(t, force("calc", "delete_all")) // listed by the server, left out by allowed_tools
	e, _ = until("error")
	require.Equal(t, "response.tool_choice.name", errOf(e)["param"], "%v", e)
	require.Zero(t, ms.called("delete_all"))

	// A forced call: the mcp_call item's sequence, its output, then a follow-up response.
	start := time.Now()
	c.send(t, force("calc", "add"))
	done, seen := until("response.done")
	var order []string
	var callItem map[string]any
	var args map[string]int
	for _, ev := range seen {
		typ := ev["type"].(string)
		switch typ {
		case "response.output_item.added", "response.output_item.done", "conversation.item.added", "conversation.item.done":
			if it, _ := ev["item"].(map[string]any); it["type"] == "mcp_call" {
				order = append(order, typ)
				callItem = it
			}
		case "response.mcp_call_arguments.delta", "response.mcp_call.in_progress", "response.mcp_call.completed":
			order = append(order, typ)
		case "response.mcp_call_arguments.done":
			order = append(order, typ)
			require.NoError(t, json.Unmarshal([]byte(ev["arguments"].(string)), &args), "%v", ev)
		}
	}
	t.Logf("forced MCP call answered (response.done) %v after response.create", time.Since(start).Round(time.Millisecond))
	require.Equal(t, []string{"response.output_item.added", "conversation.item.added", "response.mcp_call_arguments.delta",
		"response.mcp_call_arguments.done", "response.mcp_call.in_progress", "response.mcp_call.completed",
		"conversation.item.done", "response.output_item.done"}, order)
	require.Equal(t, "calc", callItem["server_label"])
	require.Equal(t, "add", callItem["name"])
	require.Equal(t, "completed", callItem["status"])
	require.Equal(t, "sum="+strconv.Itoa(args["a"]+args["b"]), callItem["output"], "the server's answer to the model's arguments")
	require.Nil(t, callItem["error"])
	require.Equal(t, 1, ms.called("add"))
	out := done["response"].(map[string]any)["output"].([]any)
	require.Equal(t, "mcp_call", out[len(out)-1].(map[string]any)["type"], "response.done carries the call")
	// The session carries on by itself: a follow-up response reads the result.
	created, _ := until("response.created")
	require.NotEqual(t, done["response"].(map[string]any)["id"], created["response"].(map[string]any)["id"])
	done, _ = until("response.done")
	require.Contains(t, []any{"completed", "incomplete"}, done["response"].(map[string]any)["status"], "%v", done)

	// Approval: the request item instead of a call; a bad answer is refused; the approval
	// runs the call in a response the session starts, whose reply follows the call.
	ask("Say hello back.")
	c.send(t, force("appr", "echo"))
	done, seen = until("response.done")
	var req map[string]any
	for _, ev := range seen {
		if ev["type"] == "conversation.item.done" && ev["item"].(map[string]any)["type"] == "mcp_approval_request" {
			req = ev["item"].(map[string]any)
		}
		require.NotContains(t, []any{"response.mcp_call.in_progress", "response.mcp_call.completed"}, ev["type"])
	}
	require.NotNil(t, req, "an mcp_approval_request item")
	require.Equal(t, "appr", req["server_label"])
	require.Equal(t, "echo", req["name"])
	require.Equal(t, "mcp_approval_request", done["response"].(map[string]any)["output"].([]any)[1].(map[string]any)["type"])
	require.Zero(t, ms.called("echo"), "nothing runs before the approval")
	c.send(t, map[string]any{"type": "conversation.item.create", "event_id": "ev_bad", "item": map[string]any{
		"type": "mcp_approval_response", "approval_request_id": "item_nope", "approve": true}})
	e, _ = until("error")
	require.Equal(t, "item.approval_request_id", errOf(e)["param"], "%v", e)
	require.Equal(t, "ev_bad", errOf(e)["event_id"])
	approve := map[string]any{"type": "conversation.item.create", "previous_item_id": req["id"], "item": map[string]any{
		"type": "mcp_approval_response", "approval_request_id": req["id"], "approve": true}}
	c.send(t, approve)
	added, _ := until("conversation.item.added")
	require.Equal(t, "mcp_approval_response", added["item"].(map[string]any)["type"])
	require.Equal(t, true, added["item"].(map[string]any)["approve"])
	until("response.created")
	done, seen = until("response.done")
	var approved map[string]any
	for _, ev := range seen {
		if ev["type"] == "response.output_item.done" && ev["item"].(map[string]any)["type"] == "mcp_call" {
			approved = ev["item"].(map[string]any)
		}
	}
	require.NotNil(t, approved, "the approved call runs: %v", seen)
	require.Equal(t, req["id"], approved["approval_request_id"])
	require.Equal(t, req["arguments"], approved["arguments"])
	var echoArgs struct{ Text string }
	require.NoError(t, json.Unmarshal([]byte(req["arguments"].(string)), &echoArgs))
	require.Equal(t, "echo:"+echoArgs.Text, approved["output"])
	require.Equal(t, 1, ms.called("echo"))
	require.Equal(t, "message", done["response"].(map[string]any)["output"].([]any)[0].(map[string]any)["type"], "the model's reply follows in the same response")
	c.send(t, approve) // answered already
	e, _ = until("error")
	require.Equal(t, "item.approval_request_id", errOf(e)["param"], "%v", e)

	// Denial: no call; the denial joins the conversation and a follow-up response reads it.
	ask("Say it again.")
	c.send(t, force("appr", "echo"))
	_, seen = until("response.done")
	req = nil
	for _, ev := range seen {
		if ev["type"] == "conversation.item.done" && ev["item"].(map[string]any)["type"] == "mcp_approval_request" {
			req = ev["item"].(map[string]any)
		}
	}
	require.NotNil(t, req)
	c.send(t, map[string]any{"type": "conversation.item.create", "item": map[string]any{
		"type": "mcp_approval_response", "approval_request_id": req["id"], "approve": false, "reason": "not now"}})
	added, _ = until("conversation.item.added")
	require.Equal(t, false, added["item"].(map[string]any)["approve"])
	require.Equal(t, "not now", added["item"].(map[string]any)["reason"])
	until("response.created")
	done, seen = until("response.done")
	for _, ev := range seen {
		if it, ok := ev["item"].(map[string]any); ok {
			require.NotEqual(t, "mcp_call", it["type"], "a denied call never runs")
		}
	}
	require.Equal(t, 1, ms.called("echo"))
	require.Len(t, done["response"].(map[string]any)["output"], 1)

	// A server that dies mid-call: the call fails with an error saying why, and the session
	// lives on (a follow-up reads the failure, and a new response answers).
	ask("Wait for it.")
	c.send(t, force("dying", "hang"))
	inProgress, _ := until("response.mcp_call.in_progress")
	select {
	case <-dying.hung:
	case <-time.After(30 * time.Second):
		t.Fatal("the call never reached the server")
	}
	dying.kill()
	failed, _ := until("response.mcp_call.failed")
	require.Equal(t, inProgress["item_id"], failed["item_id"])
	e, _ = until("error")
	require.Equal(t, "mcp_call_failed", errOf(e)["code"], "%v", e)
	require.Contains(t, errOf(e)["message"], `"hang"`)
	itemDone, _ := until("response.output_item.done")
	require.Equal(t, "failed", itemDone["item"].(map[string]any)["status"])
	callErr := itemDone["item"].(map[string]any)["error"].(map[string]any)
	require.Contains(t, []any{"protocol_error", "http_error"}, callErr["type"], "%v", callErr)
	require.NotEmpty(t, callErr["message"])
	until("response.done")
	until("response.created") // the follow-up
	until("response.done")
	ask("Still there?")
	c.send(t, map[string]any{"type": "response.create", "response": map[string]any{"tool_choice": "none"}})
	done, _ = until("response.done")
	require.Contains(t, []any{"completed", "incomplete"}, done["response"].(map[string]any)["status"])

	_, metrics := s.get(t, "/metrics")
	count := func(re string) int {
		m := regexp.MustCompile(re).FindSubmatch(metrics)
		require.NotNil(t, m, re)
		n, err := strconv.Atoi(string(m[1]))
		require.NoError(t, err)
		return n
	}
	require.Equal(t, 2, count(`omniserve_realtime_mcp_call_duration_seconds_count\{model_name="[^"]*",outcome="completed"\} (\d+)`))
	require.Equal(t, 1, count(`omniserve_realtime_mcp_call_duration_seconds_count\{model_name="[^"]*",outcome="failed"\} (\d+)`))
	failures := count(`omniserve_realtime_mcp_call_failures_total\{kind="protocol_error",model_name="[^"]*"\} (\d+)`) +
		count(`omniserve_realtime_mcp_call_failures_total\{kind="http_error",model_name="[^"]*"\} (\d+)`)
	require.Equal(t, 1, failures)
}
