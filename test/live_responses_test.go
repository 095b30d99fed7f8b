package test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// taskRuns are the Responses stream events of the response.event frames read so far, one list
// per task response (each from its response.created), in order.
func (c *liveClient) taskRuns() [][]map[string]any {
	var runs [][]map[string]any
	for _, ev := range c.eventsOf("response.event") {
		inner := ev["event"].(map[string]any)
		if inner["type"] == "response.created" || len(runs) == 0 {
			runs = append(runs, nil)
		}
		runs[len(runs)-1] = append(runs[len(runs)-1], inner)
	}
	return runs
}

// types are the events' types, in order.
func types(evs []map[string]any) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev["type"].(string)
	}
	return out
}

// untilTaskEnd is the next response.event whose event ends a task response (completed,
// incomplete or failed); an error before it fails the test.
func (c *liveClient) untilTaskEnd(t *testing.T, timeout time.Duration) (outer, inner map[string]any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ev := c.until(t, "response.event", time.Until(deadline))
		inner := ev["event"].(map[string]any)
		switch inner["type"] {
		case "response.completed", "response.incomplete", "response.failed":
			return ev, inner
		}
	}
}

// dialLiveHooked is a Live socket on a server of its own with the scripted decider on
// (--live-test-hooks); a failed test dumps what the socket read.
func dialLiveHooked(t *testing.T) *liveClient {
	t.Helper()
	c := dialLive(t, startLiveBinary(t, "--live-test-hooks"), nil)
	t.Cleanup(func() {
		if t.Failed() {
			c.dump(t)
		}
	})
	return c
}

// responsesSession is a 16 kHz session whose next user turn is delegated (the test hook) under
// Responses delegation with responses.
func responsesSession(responses map[string]any) map[string]any {
	return map[string]any{"model": "gpt-live-1", "instructions": "Look things up. [[omniserve-test:delegate]]",
		"audio":      map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 16000}},
		"delegation": map[string]any{"type": "responses", "acknowledgement_delay_ms": 0, "responses": responses}}
}

// A Responses-delegated turn runs on the local thinker: session.delegation.created with its
// response_id, the task's events as response.event (a forced function call), a bad
// response.item.create refused by name with the session going on, the client's output and
// response.create continuing the task to text, which is spoken as commentary.
func TestLiveResponsesDelegation(t *testing.T) {
	t.Parallel()
	c := dialLiveHooked(t)
	tool := map[string]any{"type": "function", "name": "lookup_order", "description": "Look up an order by its id",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"order_id": map[string]any{"type": "string"}}, "required": []any{"order_id"}}}
	responses := map[string]any{"model": "gpt-5.6-luna", "instructions": "Look orders up with lookup_order.", "max_output_tokens": 200,
		"tools": []any{tool}, "tool_choice": map[string]any{"type": "function", "name": "lookup_order"}}
	c.send(t, map[string]any{"type": "session.start", "session": responsesSession(responses)})
	c.until(t, "session.started", 30*time.Second)
	st := streamLive(t, c)
	st.say(goForwardPCM(t))
	dc := c.until(t, "session.delegation.created", 30*time.Second)
	d := dc["delegation"].(map[string]any)
	require.Equal(t, "responses", d["target"])
	respID, _ := d["response_id"].(string)
	require.True(t, strings.HasPrefix(respID, "resp_"), "%v", d)

	// The task's first response: a forced call of lookup_order, streamed in order (the call
	// alone: no empty message).
	end, inner := c.untilTaskEnd(t, 60*time.Second)
	require.Equal(t, "response.completed", inner["type"], "%v", inner)
	require.Equal(t, d["id"], end["delegation_id"])
	runs := c.taskRuns()
	require.Len(t, runs, 1)
	first := runs[0]
	require.Equal(t, []string{"response.created", "response.output_item.added", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done", "response.completed"}, types(first))
	for i, ev := range first {
		require.Equal(t, float64(i), ev["sequence_number"], "%v", ev)
	}
	require.Equal(t, respID, first[0]["response"].(map[string]any)["id"], "the delegation's response_id")
	call := first[4]["item"].(map[string]any)
	require.Equal(t, 0.0, first[4]["output_index"])
	require.Equal(t, "function_call", call["type"])
	require.Equal(t, "lookup_order", call["name"])
	require.Equal(t, "completed", call["status"])
	callID := call["call_id"].(string)
	require.NotEmpty(t, callID)
	var args map[string]any
	require.NoError(t, json.Unmarshal([]byte(call["arguments"].(string)), &args))
	require.IsType(t, "", args["order_id"], "arguments match the schema: %v", args)
	for _, ev := range []map[string]any{first[0], first[5]} {
		r := ev["response"].(map[string]any)
		require.NotContains(t, r, "output", "lifecycle snapshots omit the output")
		require.NotContains(t, r, "input", "lifecycle snapshots omit the input")
		require.Equal(t, "gpt-5.6-luna", r["model"])
	}
	require.Equal(t, "completed", first[5]["response"].(map[string]any)["status"])
	require.Zero(t, c.count("error"))

	// Bad answers are refused by name; the session goes on.
	bad := []struct {
		ev          map[string]any
		code, param string
	}{
		{map[string]any{"type": "response.item.create", "event_id": "b1"}, "missing_required_parameter", "item"},
		{map[string]any{"type": "response.item.create", "event_id": "b2", "item": map[string]any{"type": "function_call_output", "call_id": "call_nope", "output": "x"}}, "invalid_value", "item.call_id"},
		{map[string]any{"type": "response.item.create", "event_id": "b3", "item": map[string]any{"type": "message", "call_id": callID, "output": "x"}}, "invalid_value", "item.type"},
		{map[string]any{"type": "response.item.create", "event_id": "b4", "item": map[string]any{"type": "function_call_output", "call_id": callID}}, "missing_required_parameter", "item.output"},
		{map[string]any{"type": "response.item.create", "event_id": "b5", "item": map[string]any{"type": "function_call_output", "call_id": callID, "output": "x", "extra": 1}}, "unknown_parameter", "item.extra"},
		{map[string]any{"type": "response.create", "event_id": "b6"}, "invalid_value", ""}, // the call has no output yet
		// Over the admission bound of one text (seq_context × 16 bytes): refused by the session,
		// named; the call may be answered again.
		{map[string]any{"type": "response.item.create", "event_id": "b7", "item": map[string]any{"type": "function_call_output", "call_id": callID,
			"output": strings.Repeat("x", 40<<10)}}, "string_above_max_length", "item.output"},
	}
	for _, tc := range bad {
		c.send(t, tc.ev)
		liveError(t, c.until(t, "error", 20*time.Second), tc.code, tc.param, tc.ev["event_id"].(string))
	}

	// The output, then response.create: the task goes on (the forced call was its first run's)
	// and ends in text.
	c.send(t, map[string]any{"type": "response.item.create", "event_id": "out", "item": map[string]any{"type": "function_call_output",
		"call_id": callID, "output": `{"order_id": "42", "status": "shipped yesterday"}`}})
	c.send(t, map[string]any{"type": "response.create", "event_id": "go"})
	asked := time.Now()
	end, inner = c.untilTaskEnd(t, 60*time.Second)
	continued := end[recvKey].(time.Time)
	require.Equal(t, "response.completed", inner["type"], "%v", inner)
	require.Equal(t, d["id"], end["delegation_id"], "the continuation is the delegation's")
	runs = c.taskRuns()
	require.Len(t, runs, 2)
	next := runs[1]
	require.NotEqual(t, respID, next[0]["response"].(map[string]any)["id"], "a new response")
	tt := types(next)
	require.Equal(t, []string{"response.created", "response.output_item.added", "response.output_text.delta"}, tt[:3], "%v", tt)
	require.Equal(t, []string{"response.output_text.done", "response.output_item.done", "response.completed"}, tt[len(tt)-3:], "%v", tt)
	var text strings.Builder
	for _, ev := range next {
		switch ev["type"] {
		case "response.output_text.delta":
			text.WriteString(ev["delta"].(string))
		case "response.output_item.added", "response.output_item.done":
			require.Equal(t, "message", ev["item"].(map[string]any)["type"], "the continuation answers, it does not call again")
		}
	}
	answer := next[len(next)-2]["item"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"]
	require.Equal(t, text.String(), answer, "the deltas are the message's text")
	require.NotEmpty(t, strings.TrimSpace(text.String()))
	completedAt := time.Now()

	// The answer is spoken as commentary: audio and its transcript after the task ended.
	waitFor(t, 60*time.Second, "the result spoken", func() bool {
		n, _ := c.audioSince(t, completedAt)
		return n > 0
	})
	var spoken time.Time
	for _, ev := range c.eventsOf("session.output_audio.delta") {
		if at := ev[recvKey].(time.Time); at.After(continued) && spoken.IsZero() {
			spoken = at
		}
	}
	firstEnd := c.eventsOf("response.event")[len(runs[0])-1][recvKey].(time.Time)
	t.Logf("delegation.created → first task response done %v; response.create → continuation done %v; → result audible %v",
		firstEnd.Sub(dc[recvKey].(time.Time)).Round(time.Millisecond), continued.Sub(asked).Round(time.Millisecond), spoken.Sub(continued).Round(time.Millisecond))
	waitFor(t, 30*time.Second, "the result's transcript", func() bool {
		for _, ev := range c.eventsOf("session.output_transcript.delta") {
			if ev[recvKey].(time.Time).After(completedAt) {
				return true
			}
		}
		return false
	})
	require.Zero(t, c.count("error")-len(bad), "no other error")
	c.mu.Lock()
	all := slices.Clone(c.all)
	c.mu.Unlock()
	for _, ev := range all {
		typ := ev["type"].(string)
		require.False(t, strings.HasPrefix(typ, "response.") && typ != "response.event", "no Realtime event leaks: %s", typ)
		require.False(t, strings.HasPrefix(typ, "conversation."), "no Realtime event leaks: %s", typ)
	}

	// The client may start a task itself: it runs over the conversation (the forced call
	// again), without a delegation.
	c.send(t, map[string]any{"type": "response.create", "event_id": "mine"})
	end, inner = c.untilTaskEnd(t, 60*time.Second)
	require.Equal(t, "response.completed", inner["type"], "%v", inner)
	require.NotContains(t, end, "delegation_id")
	var created map[string]any
	for _, ev := range c.eventsOf("response.event") {
		if ev["event"].(map[string]any)["type"] == "response.created" {
			created = ev
		}
	}
	require.Equal(t, "mine", created["client_event_id"], "its response.created echoes the command")
	runs = c.taskRuns()
	require.Len(t, runs, 3)
	require.Contains(t, types(runs[2]), "response.function_call_arguments.done")
	st.halt()
	c.send(t, map[string]any{"type": "session.close"})
	c.until(t, "session.closed", 20*time.Second)
}

// A task that needs a hosted tool omniserve cannot run (the SDK quick-start's web_search) fails
// as a task, naming the tool; the session goes on (the delegation is still acknowledged aloud,
// and the session closes normally).
func TestLiveResponsesHostedToolFailsTheTask(t *testing.T) {
	t.Parallel()
	c := dialLiveHooked(t)
	c.send(t, map[string]any{"type": "session.start", "session": responsesSession(map[string]any{"model": "gpt-5.6-luna",
		"tools": []any{map[string]any{"type": "web_search"}}})})
	c.until(t, "session.started", 30*time.Second)
	st := streamLive(t, c)
	st.say(goForwardPCM(t))
	dc := c.until(t, "session.delegation.created", 30*time.Second)
	end, inner := c.untilTaskEnd(t, 30*time.Second)
	require.Equal(t, "response.failed", inner["type"])
	require.Equal(t, dc["delegation"].(map[string]any)["id"], end["delegation_id"])
	r := inner["response"].(map[string]any)
	require.Equal(t, dc["delegation"].(map[string]any)["response_id"], r["id"])
	require.Equal(t, "failed", r["status"])
	e := r["error"].(map[string]any)
	require.Equal(t, "unsupported_tool", e["code"])
	require.Contains(t, e["message"], "web_search")
	waitFor(t, 30*time.Second, "the spoken acknowledgement", func() bool {
		n, _ := c.audioSince(t, dc[recvKey].(time.Time))
		return n > 0
	})
	require.Zero(t, c.count("error"))
	st.halt()
	c.send(t, map[string]any{"type": "session.close"})
	c.until(t, "session.closed", 20*time.Second)
}
