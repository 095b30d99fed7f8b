package live

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

func lookupTool() map[string]any {
	return map[string]any{"type": "function", "name": "lookup", "description": "Look it up",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}}
}

// responsesStart is a session with Responses delegation over responses whose next user turn is
// delegated (the test hook).
func responsesStart(responses map[string]any) map[string]any {
	return with(with(quickStart(), "instructions", "Be brief. "+DelegateMarker), "delegation",
		map[string]any{"type": "responses", "acknowledgement_delay_ms": 0, "responses": responses})
}

// appendCmds appends 100 ms of input and returns the commands after the audio.
func appendCmds(t *testing.T, tr *Translator) []session.Command {
	t.Helper()
	cmd, werr := tr.Decode(appendFrame(t, 4800))
	require.Nil(t, werr)
	_, cmds := cmd.(*Reply).Answer()
	require.IsType(t, &session.AppendAudio{}, cmds[0])
	return cmds[1:]
}

// inner is the Responses stream event each response.event of evs carries.
func inner(t *testing.T, evs []protocol.ServerEvent) []map[string]any {
	t.Helper()
	out := make([]map[string]any, len(evs))
	for i, ev := range evs {
		re, ok := ev.(responseEvent)
		require.True(t, ok, "%#v", ev)
		out[i] = re.Event
	}
	return out
}

// A delegated task runs on the local thinker: an out-of-band text response with the
// delegation's instructions, tools and tool_choice; its effects are response.event (the
// Responses API's stream, never Live's transcript); a call waits for the client's output and
// response.create, the continuation (tool_choice no longer forced) ends in text, which joins the
// conversation and is said as commentary.
func TestResponsesTaskRuns(t *testing.T) {
	tr := New(Options{TestHooks: true})
	start(t, tr, responsesStart(map[string]any{"model": "m", "instructions": "Use lookup.", "max_output_tokens": 300,
		"tools": []any{lookupTool()}, "tool_choice": map[string]any{"type": "function", "name": "lookup"}}))
	tr.EncodeAll(session.InputSpeech{Phase: session.PhaseStarted, AudioMs: 100})
	evs := tr.EncodeAll(session.InputSpeech{Phase: session.PhaseStopped, AudioMs: 900})
	require.Len(t, evs, 1, "the task waits for its turn")
	dc := evs[0].(delegationCreated)
	require.Equal(t, "responses", dc.Delegation.Target)
	require.Regexp(t, "^resp_", dc.Delegation.ResponseID)

	// The acknowledgement is due at once (delay 0) and goes first; the task after it.
	cmds := appendCmds(t, tr)
	require.Len(t, cmds, 1)
	require.Equal(t, ackInstructions, *cmds[0].(*session.CreateResponse).Instructions)
	tr.EncodeAll(session.ResponseStarted{Response: session.ResponseInfo{ID: "ack"}})
	require.Empty(t, appendCmds(t, tr), "nothing while the acknowledgement plays")
	tr.EncodeAll(session.ResponseDone{Response: session.ResponseInfo{ID: "ack", Status: "completed"}})
	require.Empty(t, appendCmds(t, tr), "the engine has not decided on the turn yet: a task now would be cut short by its reply")
	tr.EncodeAll(session.TurnDecision{})
	cmds = appendCmds(t, tr)
	require.Len(t, cmds, 1)
	cr := cmds[0].(*session.CreateResponse)
	require.Equal(t, "none", cr.Conversation, "out of band")
	require.Equal(t, []string{"text"}, cr.Modalities, "nothing is spoken")
	require.Contains(t, *cr.Instructions, "Use lookup.")
	require.Equal(t, 300, *cr.MaxOutputTokens)
	require.True(t, cr.ToolsSet)
	require.Equal(t, "lookup", cr.Tools[0].Name)
	require.Equal(t, &session.ToolChoice{Mode: "function", Function: "lookup"}, cr.ToolChoice)
	require.Equal(t, dc.Delegation.ResponseID, cr.Metadata[taskMeta])
	require.Empty(t, appendCmds(t, tr), "one run at a time")

	// Its stream: the call alone (the empty message is not told), numbered as told.
	info := session.ResponseInfo{ID: "r1", Metadata: cr.Metadata}
	got := inner(t, tr.EncodeAll(session.ResponseStarted{Response: info}))
	require.Equal(t, "response.created", got[0]["type"])
	require.Equal(t, dc.Delegation.ResponseID, got[0]["response"].(map[string]any)["id"])
	require.Equal(t, "in_progress", got[0]["response"].(map[string]any)["status"])
	require.NotContains(t, got[0]["response"], "output")
	require.Empty(t, tr.EncodeAll(session.OutputItem{Phase: session.PhaseAdded, ResponseID: "r1", Item: session.Item{ID: "msg", Type: "message"}}))
	call := session.Item{ID: "fc", Type: "function_call", CallID: "call_1", Name: "lookup", Arguments: `{"q":"x"}`}
	var stream []protocol.ServerEvent
	for _, e := range []session.Effect{
		session.OutputItem{Phase: session.PhaseAdded, ResponseID: "r1", OutputIndex: 1, Item: session.Item{ID: "fc", Type: "function_call", CallID: "call_1", Name: "lookup"}},
		session.CallArguments{Phase: session.PhaseDelta, ResponseID: "r1", ItemID: "fc", OutputIndex: 1, Text: `{"q":"x"}`},
		session.CallArguments{Phase: session.PhaseDone, ResponseID: "r1", ItemID: "fc", OutputIndex: 1, Name: "lookup", Text: `{"q":"x"}`},
		session.OutputItem{Phase: session.PhaseDone, ResponseID: "r1", OutputIndex: 1, Item: call},
		session.OutputDone{Kind: session.PartText, ResponseID: "r1", ItemID: "msg"},
		session.OutputItem{Phase: session.PhaseDone, ResponseID: "r1", Item: session.Item{ID: "msg", Type: "message"}},
		session.ResponseDone{Response: session.ResponseInfo{ID: "r1", Status: "completed", Metadata: cr.Metadata, Usage: &session.Usage{InputTokens: 10, OutputTokens: 5, TotalTokens: 15}}},
	} {
		stream = append(stream, tr.EncodeAll(e)...)
	}
	got = inner(t, stream)
	require.Equal(t, []map[string]any{
		{"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": map[string]any{"id": "fc", "type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "", "status": "in_progress"}},
		{"type": "response.function_call_arguments.delta", "sequence_number": 2, "output_index": 0, "item_id": "fc", "delta": `{"q":"x"}`},
		{"type": "response.function_call_arguments.done", "sequence_number": 3, "output_index": 0, "item_id": "fc", "name": "lookup", "arguments": `{"q":"x"}`},
		{"type": "response.output_item.done", "sequence_number": 4, "output_index": 0, "item": map[string]any{"id": "fc", "type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": `{"q":"x"}`, "status": "completed"}},
	}, got[:4])
	require.Equal(t, "response.completed", got[4]["type"])
	require.Equal(t, map[string]any{"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}, got[4]["response"].(map[string]any)["usage"])
	for _, ev := range stream {
		require.Equal(t, dc.Delegation.ID, ev.(responseEvent).DelegationID)
	}

	// The answer: refusals name the param; then the call joins the conversation with its output.
	_, werr := tr.Decode(frame(t, map[string]any{"type": "response.create", "event_id": "early"}))
	require.Equal(t, "invalid_value", werr.Code, "the call has no output yet")
	require.Contains(t, werr.Message, "call_1")
	_, werr = tr.Decode(frame(t, map[string]any{"type": "response.item.create", "event_id": "x", "item": map[string]any{"type": "function_call_output", "call_id": "call_2", "output": "o"}}))
	require.Equal(t, protocol.Error{Code: "invalid_value", Param: "item.call_id", EventID: "x", Message: `No function call of a Responses task has call_id "call_2".`}, *werr)
	cmd, werr := tr.Decode(frame(t, map[string]any{"type": "response.item.create", "event_id": "o", "item": map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "found"}}))
	require.Nil(t, werr)
	_, cmds = cmd.(*Reply).Answer()
	require.Len(t, cmds, 2)
	restore := cmds[0].(*session.CreateItem)
	require.Equal(t, session.CreateItem{Base: restore.Base, ItemType: "function_call", CallID: "call_1", Name: "lookup", Arguments: `{"q":"x"}`}, *restore)
	require.Equal(t, &session.CreateItem{Base: session.Base{ID: "o", Kind: "response.item.create"}, ItemType: "function_call_output", CallID: "call_1", Output: "found"}, cmds[1])
	_, werr = tr.Decode(frame(t, map[string]any{"type": "response.item.create", "event_id": "o2", "item": map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "again"}}))
	require.Equal(t, "item.call_id", werr.Param, "one output a call")
	for _, tc := range []struct {
		response    any
		code, param string
	}{
		{map[string]any{"tool_choice": "none"}, "unknown_parameter", "response.tool_choice"},
		{"now", "invalid_type", "response"},
	} {
		_, werr = tr.Decode(frame(t, map[string]any{"type": "response.create", "event_id": "r", "response": tc.response}))
		require.Equal(t, tc.code, werr.Code, werr.Message)
		require.Equal(t, tc.param, werr.Param)
		require.Equal(t, "r", werr.EventID)
	}
	cmd, werr = tr.Decode(frame(t, map[string]any{"type": "response.create", "event_id": "go", "response": map[string]any{}}))
	require.Nil(t, werr)
	evs, _ = cmd.(*Reply).Answer()
	require.Empty(t, evs)

	// The continuation: auto, not forced again; its text is streamed, never the track's.
	cmds = appendCmds(t, tr)
	require.Len(t, cmds, 1)
	cr2 := cmds[0].(*session.CreateResponse)
	created := tr.EncodeAll(session.ResponseStarted{Response: session.ResponseInfo{ID: "r2", Metadata: cr2.Metadata}})[0].(responseEvent)
	require.Equal(t, "go", created.ClientEventID, "the response.create it answers")
	require.Equal(t, dc.Delegation.ID, created.DelegationID, "the continuation is the delegation's")
	require.Equal(t, &session.ToolChoice{Mode: "auto"}, cr2.ToolChoice)
	require.NotEqual(t, cr.Metadata[taskMeta], cr2.Metadata[taskMeta])
	tr.EncodeAll(session.OutputItem{Phase: session.PhaseAdded, ResponseID: "r2", Item: session.Item{ID: "m2", Type: "message"}})
	got = inner(t, tr.EncodeAll(session.OutputDelta{Kind: session.PartText, ResponseID: "r2", ItemID: "m2", Text: "It is found."}))
	require.Equal(t, []string{"response.output_item.added", "response.output_text.delta"}, []string{got[0]["type"].(string), got[1]["type"].(string)})
	require.Equal(t, "It is found.", got[1]["delta"])
	require.Empty(t, tr.EncodeAll(session.OutputDelta{Kind: session.PartAudio, ResponseID: "r2", Audio: make([]byte, 480)}), "no audio on the track")
	got = inner(t, tr.EncodeAll(session.OutputDone{Kind: session.PartText, ResponseID: "r2", ItemID: "m2", Text: "It is found."}))
	require.Equal(t, "It is found.", got[0]["text"])
	got = inner(t, tr.EncodeAll(session.OutputItem{Phase: session.PhaseDone, ResponseID: "r2", Item: session.Item{ID: "m2", Type: "message", Text: "It is found."}}))
	require.Equal(t, []any{map[string]any{"type": "output_text", "text": "It is found.", "annotations": []any{}}}, got[0]["item"].(map[string]any)["content"])
	got = inner(t, tr.EncodeAll(session.ResponseDone{Response: session.ResponseInfo{ID: "r2", Status: "completed"}}))
	require.Equal(t, "response.completed", got[0]["type"])

	// The result joins the conversation and is said at once (the user is silent).
	cmds = appendCmds(t, tr)
	require.Len(t, cmds, 2)
	require.Equal(t, "Tell the user this now, in your own words: It is found.", cmds[0].(*session.CreateItem).Text)
	require.Equal(t, "system", cmds[0].(*session.CreateItem).Role)
	require.Empty(t, cmds[1].(*session.CreateResponse).Conversation, "said in the conversation")
}

// A run the user's speech interrupted before it called anything ends incomplete and the task
// runs again at the next silence; a refusal because a reply started first asks again; an engine
// failure fails the run as a task (response.failed), not the session.
func TestResponsesTaskInterruptedAndFailed(t *testing.T) {
	tr := New(Options{})
	start(t, tr, with(quickStart(), "delegation", map[string]any{"type": "responses", "responses": map[string]any{"model": "m"}}))
	cmd, werr := tr.Decode(frame(t, map[string]any{"type": "response.create"}))
	require.Nil(t, werr)
	evs, _ := cmd.(*Reply).Answer()
	require.Empty(t, evs, "a task over the conversation, queued")
	cr := appendCmds(t, tr)[0].(*session.CreateResponse)
	require.Nil(t, cr.ToolChoice)
	require.Empty(t, tr.EncodeAll(session.Error{Code: "conversation_already_has_active_response", EventID: cr.ID}))
	cr = appendCmds(t, tr)[0].(*session.CreateResponse)
	id := cr.Metadata[taskMeta]

	tr.EncodeAll(session.ResponseStarted{Response: session.ResponseInfo{ID: "r1", Metadata: cr.Metadata}})
	got := inner(t, tr.EncodeAll(session.ResponseDone{Response: session.ResponseInfo{ID: "r1", Status: "cancelled",
		StatusDetails: &session.StatusDetails{Type: "cancelled", Reason: "turn_detected"}}}))
	require.Equal(t, "response.incomplete", got[0]["type"])
	require.Equal(t, map[string]any{"reason": "interrupted"}, got[0]["response"].(map[string]any)["incomplete_details"])
	tr.EncodeAll(session.InputSpeech{Phase: session.PhaseStarted})
	require.Empty(t, appendCmds(t, tr), "not while the user speaks")
	tr.EncodeAll(session.InputSpeech{Phase: session.PhaseStopped})
	require.Empty(t, appendCmds(t, tr), "not before the engine's decision on the turn")
	tr.EncodeAll(session.ResponseStarted{Response: session.ResponseInfo{ID: "reply"}})
	tr.EncodeAll(session.ResponseDone{Response: session.ResponseInfo{ID: "reply", Status: "completed"}})
	cr = appendCmds(t, tr)[0].(*session.CreateResponse)
	require.NotEqual(t, id, cr.Metadata[taskMeta], "a new response of the same task")
	// A decision that never comes is waited for 2 s of timeline at most.
	tr.EncodeAll(session.ResponseStarted{Response: session.ResponseInfo{ID: "rz", Metadata: cr.Metadata}})
	tr.EncodeAll(session.ResponseDone{Response: session.ResponseInfo{ID: "rz", Status: "cancelled"}})
	tr.EncodeAll(session.InputSpeech{Phase: session.PhaseStarted})
	tr.EncodeAll(session.InputSpeech{Phase: session.PhaseStopped})
	for range decisionWaitMs/100 - 1 { // 100 ms an append
		require.Empty(t, appendCmds(t, tr))
	}
	cr = appendCmds(t, tr)[0].(*session.CreateResponse)

	// Interrupted again and again, the task ends (an engine that aborts every run does not
	// loop).
	for i := 3; i < maxTaskTries; i++ {
		tr.EncodeAll(session.ResponseStarted{Response: session.ResponseInfo{ID: "rx", Metadata: cr.Metadata}})
		tr.EncodeAll(session.ResponseDone{Response: session.ResponseInfo{ID: "rx", Status: "cancelled"}})
		cr = appendCmds(t, tr)[0].(*session.CreateResponse)
	}
	tr.EncodeAll(session.ResponseStarted{Response: session.ResponseInfo{ID: "ry", Metadata: cr.Metadata}})
	got = inner(t, tr.EncodeAll(session.ResponseDone{Response: session.ResponseInfo{ID: "ry", Status: "cancelled"}}))
	require.Equal(t, "response.incomplete", got[0]["type"])
	require.Empty(t, appendCmds(t, tr), "the task ended")

	_, _ = tr.Decode(frame(t, map[string]any{"type": "response.create"}))
	cr = appendCmds(t, tr)[0].(*session.CreateResponse)
	tr.EncodeAll(session.ResponseStarted{Response: session.ResponseInfo{ID: "r2", Metadata: cr.Metadata}})
	require.Empty(t, tr.EncodeAll(session.Error{Type: "server_error", Code: "engine_error", Message: "the engine broke"}), "the run's failure")
	got = inner(t, tr.EncodeAll(session.ResponseDone{Response: session.ResponseInfo{ID: "r2", Status: "failed",
		StatusDetails: &session.StatusDetails{Type: "failed", Reason: "engine_error"}}}))
	require.Equal(t, "response.failed", got[0]["type"])
	require.Equal(t, map[string]any{"code": "engine_error", "message": "the engine broke"}, got[0]["response"].(map[string]any)["error"])
	require.Empty(t, appendCmds(t, tr), "the task is over")

	// A refusal of the run's options fails it, naming the delegation's param.
	_, _ = tr.Decode(frame(t, map[string]any{"type": "response.create"}))
	cr = appendCmds(t, tr)[0].(*session.CreateResponse)
	got = inner(t, tr.EncodeAll(session.Error{Code: "invalid_value", Param: "response.max_output_tokens", Message: "too big", EventID: cr.ID}))
	require.Equal(t, "response.failed", got[0]["type"])
	require.Equal(t, "too big (session.delegation.responses.max_output_tokens)", got[0]["response"].(map[string]any)["error"].(map[string]any)["message"])
}

// The delegation's tool_choice is checked at the start by its path; a hosted tool or MCP
// server fails the task by name, never the start.
func TestResponsesToolChoiceAndHostedTools(t *testing.T) {
	path := "session.delegation.responses.tool_choice"
	for _, tc := range []struct {
		name   string
		choice any
		param  string
	}{
		{"unknown mode", "sometimes", path},
		{"required without functions", "required", path},
		{"unknown function", map[string]any{"type": "function", "name": "nope"}, path + ".name"},
		{"no type", map[string]any{"name": "lookup"}, path + ".type"},
		{"not a choice", 3, path},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tools := []any{lookupTool()}
			if tc.name == "required without functions" {
				tools = nil
			}
			_, werr := New(Options{}).Decode(frame(t, map[string]any{"type": "session.start", "session": responsesStart(map[string]any{
				"model": "m", "tools": tools, "tool_choice": tc.choice})}))
			require.NotNil(t, werr)
			require.Equal(t, tc.param, werr.Param, werr.Message)
		})
	}
	for _, tc := range []struct {
		name, want string
		responses  map[string]any
	}{
		{"mcp", "mcp", map[string]any{"model": "m", "tools": []any{lookupTool(), map[string]any{"type": "mcp", "server_label": "x"}}}},
		{"file_search", "file_search", map[string]any{"model": "m", "tools": []any{map[string]any{"type": "file_search"}}}},
		{"a hosted tool_choice", "web_search_preview", map[string]any{"model": "m", "tools": []any{lookupTool()}, "tool_choice": map[string]any{"type": "web_search_preview"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := New(Options{})
			start(t, tr, responsesStart(tc.responses))
			cmd, werr := tr.Decode(frame(t, map[string]any{"type": "response.create"}))
			require.Nil(t, werr)
			evs, _ := cmd.(*Reply).Answer()
			got := inner(t, evs)
			require.Equal(t, "response.failed", got[0]["type"])
			e := got[0]["response"].(map[string]any)["error"].(map[string]any)
			require.Equal(t, "unsupported_tool", e["code"])
			require.Contains(t, e["message"], tc.want)
		})
	}
}
