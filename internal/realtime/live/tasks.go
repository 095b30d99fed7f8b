package live

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// Responses delegation runs its tasks on the local thinker. A task run is an out-of-band,
// text-only response of the same session (conversation "none": its reply never joins the
// conversation, nothing of it is spoken), reading the conversation so far with the delegation's
// instructions after it and its function tools; its effects go to the client as response.event
// carrying the Responses API's stream events, never as Live's transcript or audio. The session
// runs one response at a time, so a run is asked for only while the user is silent and no reply
// plays (dueCommands), as commentary is.
//
// A function call the run makes waits for the client: response.item.create with its
// function_call_output restores the call and adds the output to the conversation (the voice
// model knows what was looked up), and response.create runs the task on in a new response.
// A run that ends with text and no calls ends the task: the text is spoken as commentary and
// the conversation keeps it. A run the user's speech interrupted ends incomplete and the task
// runs again at the next silence (interrupting the model does not cancel delegated work).

// taskMeta is the metadata key that marks a task run's response with its Live response id: the
// session echoes metadata in the response's start and end.
const taskMeta = "omniserve_live_task"

// maxQueuedRuns bounds the task runs waiting for their turn.
const maxQueuedRuns = 4

// maxTaskTries bounds the runs of a task that are interrupted (each by the user's speech, or
// an engine abort): the last one's response.incomplete ends the task.
const maxTaskTries = 3

// maxPendingCalls bounds the function calls waiting for their outputs.
const maxPendingCalls = 64

// taskInstructions head every task run's instructions; the delegation's own follow.
const taskInstructions = "You are now working on a task the voice assistant delegated to you: the user's latest request " +
	"in the conversation above. Use the tools when they help, then answer in plain text; your answer will be spoken to the user."

// taskRun is one Live response of a task: one out-of-band response of the session.
type taskRun struct {
	id           string // the Live response's id (resp_…)
	delegationID string // "" for a task the client began with response.create
	model        string // the delegation's model, as the client named it
	// clientEventID is the response.create that asked for the run ("" for none): its first
	// event echoes it.
	clientEventID string
	// next: the run goes on from its task's function outputs (a forced tool_choice is auto
	// then); tries counts the task's runs interrupted before this one.
	next    bool
	tries   int
	respID  string // the session's response running it, once it started
	created int64
	seq     int
	calls   int
	text    strings.Builder
	// index numbers the items as they are told; msgIndex is the message's session index, and
	// msgTold whether it was told (from its first text).
	index    map[int]int
	msgIndex int
	msgTold  bool
	// held is an engine error told while the run was active: it becomes the run's
	// response.failed instead of a session error.
	held *session.Error
}

// taskCall is a function call of a task waiting for its output.
type taskCall struct {
	name, arguments, delegationID string
	// restored: the call joined the conversation; sent: its output was given (answerID the
	// client's event, "" for none), until the session refuses it.
	restored, sent bool
	answerID       string
}

// tasks are the session's Responses tasks: the runs waiting for their turn, the one asked for
// and the one running (one at a time), the calls waiting for outputs, the results to say.
type tasks struct {
	queue   []*taskRun
	asked   *taskRun
	running *taskRun
	calls   map[string]*taskCall
	say     []string
}

func (ts *tasks) busy() bool { return ts.asked != nil || ts.running != nil }

// runFor is the running run whose session response is respID (nil for another response).
func (ts *tasks) runFor(respID string) *taskRun {
	if ts.running != nil && respID != "" && ts.running.respID == respID {
		return ts.running
	}
	return nil
}

// add queues the first run of a task of the delegation rc under Live response id
// (delegationID: the delegation it answers, "" for one the client began; clientEventID: the
// response.create that asked for it, echoed by its first event). A task omniserve
// cannot run, or one past the queue's bound, fails at once as a task: the events say so.
func (ts *tasks) add(rc *responsesConfig, id, delegationID, clientEventID string) []protocol.ServerEvent {
	run := &taskRun{id: id, delegationID: delegationID, clientEventID: clientEventID, model: *rc.Model, created: time.Now().Unix()}
	if code, msg := unrunnable(rc); code != "" {
		return []protocol.ServerEvent{run.failed(code, msg)}
	}
	if len(ts.queue) >= maxQueuedRuns {
		return []protocol.ServerEvent{run.failed("too_many_tasks",
			fmt.Sprintf("%d Responses tasks are already waiting to run; try again when one ended.", maxQueuedRuns))}
	}
	ts.queue = append(ts.queue, run)
	return nil
}

// unrunnable says why the delegation's tasks cannot run on omniserve ("" when they can): a
// hosted tool (web_search, file_search, ...; mcp: no MCP server is connected to tasks), or a
// tool_choice of one.
func unrunnable(rc *responsesConfig) (code, msg string) {
	if hosted := hostedTools(rc); len(hosted) > 0 {
		return "unsupported_tool", fmt.Sprintf("the task needs tools omniserve cannot run: %s (hosted tools are not served; "+
			"MCP servers are not connected to Live tasks; function tools are) (docs/LIVE.md)", strings.Join(hosted, ", "))
	}
	if c, _ := toolChoice(rc.ToolChoice, functionNames(rc.Tools), ""); c != nil && !slices.Contains([]string{"auto", "none", "required", "function"}, c.Mode) {
		return "unsupported_tool", fmt.Sprintf("the task's tool_choice is a %s tool, which omniserve cannot run (docs/LIVE.md)", c.Mode)
	}
	return "", ""
}

// hostedTools are the Responses delegation's tools omniserve cannot run (every type but
// function).
func hostedTools(rc *responsesConfig) []string {
	var out []string
	for _, raw := range rc.Tools {
		var tool struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(raw, &tool) == nil && tool.Type != "function" {
			out = append(out, tool.Type)
		}
	}
	return out
}

// wireTool is a Responses function tool as the delegation declares it (checked at the start).
type wireTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// functionTools are the delegation's function tools for the thinker.
func functionTools(raws []json.RawMessage) []duplex.Tool {
	out := []duplex.Tool{} // declared: replaces the session's (none)
	for _, raw := range raws {
		var w wireTool
		if json.Unmarshal(raw, &w) == nil && w.Type == "function" {
			out = append(out, duplex.Tool{Name: w.Name, Description: w.Description, Parameters: w.Parameters})
		}
	}
	return out
}

func functionNames(raws []json.RawMessage) []string {
	var out []string
	for _, f := range functionTools(raws) {
		out = append(out, f.Name)
	}
	return out
}

// ask is the next queued run's response (its command id cmdID), of the delegation rc as it is
// now: out of band, text only, over the conversation with the delegation's instructions, tools,
// tool_choice and max_output_tokens; nil when none waits.
func (ts *tasks) ask(rc *responsesConfig, cmdID func() string) *session.CreateResponse {
	if len(ts.queue) == 0 {
		return nil
	}
	run := ts.queue[0]
	ts.queue = ts.queue[1:]
	ts.asked = run
	instr := taskInstructions
	if rc.Instructions != nil && strings.TrimSpace(*rc.Instructions) != "" {
		instr += "\n\n" + *rc.Instructions
	}
	choice, _ := toolChoice(rc.ToolChoice, functionNames(rc.Tools), "") // checked at the start
	if run.next && choice != nil && (choice.Mode == "required" || choice.Mode == "function") {
		// A forced call forces the task's first run only: forced again after its outputs, the
		// model could never answer (the OpenAI Agents SDK resets tool_choice after a call too).
		choice = &session.ToolChoice{Mode: "auto"}
	}
	return &session.CreateResponse{Base: session.Base{ID: cmdID(), Kind: "response.create"},
		Conversation: "none", Modalities: []string{"text"}, Instructions: &instr, MaxOutputTokens: rc.MaxOutputTokens,
		ToolsSet: true, Tools: functionTools(rc.Tools), ToolChoice: choice, ParallelToolCalls: rc.ParallelToolCalls,
		Metadata: map[string]string{taskMeta: run.id}}
}

// taskRefused is the session's refusal of the run asked for: asked again at the next silence
// when a reply started in between, else the run fails, saying why (the param named as the
// delegation's).
func (ts *tasks) refused(e session.Error) []protocol.ServerEvent {
	run := ts.asked
	ts.asked = nil
	if run == nil {
		return nil
	}
	if e.Code == "conversation_already_has_active_response" {
		ts.queue = append([]*taskRun{run}, ts.queue...)
		return nil
	}
	msg := e.Message
	if e.Param != "" {
		msg = fmt.Sprintf("%s (%s)", msg, strings.Replace(e.Param, "response.", "session.delegation.responses.", 1))
	}
	return []protocol.ServerEvent{run.failed(e.Code, msg)}
}

// taskEffect is the response.event of an effect of a task run; ok is false for an effect that
// is not a task's.
func (ts *tasks) effect(e session.Effect) (evs []protocol.ServerEvent, ok bool) {
	switch e := e.(type) {
	case session.ResponseStarted:
		return ts.started(e.Response)
	case session.ResponseDone:
		if run := ts.runFor(e.Response.ID); run != nil {
			return ts.done(run, e.Response), true
		}
	case session.ConversationItem:
		ts.outputTaken(e)
	case session.Error:
		// An engine failure while a run is active fails that run: it is told as its
		// response.failed, not as a session error.
		if run := ts.running; run != nil && e.EventID == "" && run.held == nil && engineFailure(e.Code) {
			run.held = &e
			return nil, true
		}
	default:
		return ts.output(e)
	}
	return nil, false
}

// engineFailure reports the codes of an engine error that fails the active response.
func engineFailure(code string) bool {
	return slices.Contains([]string{"engine_error", "context_length_exceeded", "kv_cache_full", "server_error"}, code)
}

// started is the start of a response: the run asked for when it carries its mark.
func (ts *tasks) started(r session.ResponseInfo) ([]protocol.ServerEvent, bool) {
	id := r.Metadata[taskMeta]
	if id == "" {
		return nil, false
	}
	run := ts.asked
	if run == nil || run.id != id {
		return nil, true // not ours to tell (cannot happen: one run is asked at a time)
	}
	ts.asked, ts.running = nil, run
	run.respID = r.ID
	return []protocol.ServerEvent{run.lifecycle("response.created", "in_progress", nil)}, true
}

// output is a running run's output: its items, text and calls as the Responses API streams
// them; its audio cannot be (the run is text only) and its content parts are not told.
func (ts *tasks) output(e session.Effect) ([]protocol.ServerEvent, bool) {
	var respID string
	switch e := e.(type) {
	case session.OutputItem:
		respID = e.ResponseID
	case session.OutputDelta:
		respID = e.ResponseID
	case session.OutputDone:
		respID = e.ResponseID
	case session.CallArguments:
		respID = e.ResponseID
	case session.ContentPart:
		respID = e.ResponseID
	}
	run := ts.runFor(respID)
	if run == nil {
		return nil, false
	}
	switch e := e.(type) {
	case session.OutputItem:
		return ts.item(run, e), true
	case session.OutputDelta:
		return run.textDelta(e), true
	case session.OutputDone:
		if e.Kind != session.PartText || !run.msgTold {
			return nil, true
		}
		return []protocol.ServerEvent{run.stream(map[string]any{"type": "response.output_text.done", "item_id": e.ItemID,
			"output_index": run.indexOf(run.msgIndex), "content_index": 0, "text": e.Text})}, true
	case session.CallArguments:
		return []protocol.ServerEvent{run.arguments(e)}, true
	}
	return nil, true
}

// indexOf is the Live output index of the session's output index i: items are numbered as
// they are told (the message only once it has text: a forced call's response has the call alone).
func (run *taskRun) indexOf(i int) int {
	if run.index == nil {
		run.index = map[int]int{}
	}
	n, ok := run.index[i]
	if !ok {
		n = len(run.index)
		run.index[i] = n
	}
	return n
}

// textDelta is response.output_text.delta of the run's message, after its output_item.added
// at its first text.
func (run *taskRun) textDelta(e session.OutputDelta) []protocol.ServerEvent {
	if e.Kind != session.PartText || e.Text == "" {
		return nil
	}
	var evs []protocol.ServerEvent
	if !run.msgTold {
		run.msgTold = true
		evs = append(evs, run.stream(map[string]any{"type": "response.output_item.added", "output_index": run.indexOf(run.msgIndex),
			"item": map[string]any{"id": e.ItemID, "type": "message", "role": "assistant", "status": "in_progress", "content": []any{}}}))
	}
	run.text.WriteString(e.Text)
	return append(evs, run.stream(map[string]any{"type": "response.output_text.delta", "item_id": e.ItemID,
		"output_index": run.indexOf(run.msgIndex), "content_index": 0, "delta": e.Text}))
}

// arguments is response.function_call_arguments.delta / .done of the run's call.
func (run *taskRun) arguments(e session.CallArguments) protocol.ServerEvent {
	ev := map[string]any{"type": "response.function_call_arguments.delta", "item_id": e.ItemID, "output_index": run.indexOf(e.OutputIndex), "delta": e.Text}
	if e.Phase == session.PhaseDone {
		ev = map[string]any{"type": "response.function_call_arguments.done", "item_id": e.ItemID, "output_index": run.indexOf(e.OutputIndex),
			"name": e.Name, "arguments": e.Text}
	}
	return run.stream(ev)
}

// item is response.output_item.added / .done of a run's item: a function call, which waits for
// its output from the client once done, or its message (told from its first text on).
func (ts *tasks) item(run *taskRun, e session.OutputItem) []protocol.ServerEvent {
	it := e.Item
	if it.Type != "function_call" {
		if e.Phase == session.PhaseAdded {
			run.msgIndex = e.OutputIndex
			return nil
		}
		if !run.msgTold {
			return nil // no text: no message
		}
		return []protocol.ServerEvent{run.stream(map[string]any{"type": "response.output_item.done", "output_index": run.indexOf(e.OutputIndex),
			"item": map[string]any{"id": it.ID, "type": "message", "role": "assistant", "status": "completed",
				"content": []any{map[string]any{"type": "output_text", "text": it.Text, "annotations": []any{}}}}})}
	}
	typ, status := "response.output_item.added", "in_progress"
	if e.Phase == session.PhaseDone {
		typ, status = "response.output_item.done", "completed"
		ts.callMade(run, it)
	}
	return []protocol.ServerEvent{run.stream(map[string]any{"type": typ, "output_index": run.indexOf(e.OutputIndex),
		"item": map[string]any{"id": it.ID, "type": "function_call", "call_id": it.CallID, "name": it.Name, "arguments": it.Arguments, "status": status}})}
}

// callMade notes a run's function call: it waits for the client's output.
func (ts *tasks) callMade(run *taskRun, it session.Item) {
	run.calls++
	if ts.calls == nil {
		ts.calls = map[string]*taskCall{}
	}
	if len(ts.calls) < maxPendingCalls {
		ts.calls[it.CallID] = &taskCall{name: it.Name, arguments: it.Arguments, delegationID: run.delegationID}
	}
}

// done ends a run: response.completed, .incomplete or .failed. A run that ended with text and
// no calls ends its task (the text is said as commentary); one the user interrupted before it
// called anything runs again.
func (ts *tasks) done(run *taskRun, r session.ResponseInfo) []protocol.ServerEvent {
	ts.running = nil
	var evs []protocol.ServerEvent
	if run.held != nil && r.Status != "failed" {
		evs = append(evs, errorEvent(&protocol.Error{Code: run.held.Code, Message: run.held.Message, Param: run.held.Param}, run.held.Type))
	}
	reason := ""
	if r.StatusDetails != nil {
		reason = r.StatusDetails.Reason
	}
	switch r.Status {
	case "failed":
		code, msg := reason, "the task's response failed on the local thinker"
		if h := run.held; h != nil {
			code, msg = h.Code, h.Message
		}
		return append(evs, run.failed(code, msg))
	case "cancelled":
		evs = append(evs, run.lifecycle("response.incomplete", "incomplete", map[string]any{"incomplete_details": map[string]any{"reason": "interrupted"}}))
		if run.calls == 0 && run.tries+1 < maxTaskTries {
			// The user spoke over it: the task goes on at the next silence, in a new response.
			ts.queue = append(ts.queue, &taskRun{id: newID("resp_"), delegationID: run.delegationID, model: run.model,
				next: run.next, tries: run.tries + 1, created: time.Now().Unix()})
		}
		return evs
	case "incomplete":
		evs = append(evs, run.lifecycle("response.incomplete", "incomplete", map[string]any{"incomplete_details": map[string]any{"reason": reason}, "usage": usage(r.Usage)}))
	default:
		evs = append(evs, run.lifecycle("response.completed", "completed", map[string]any{"usage": usage(r.Usage)}))
	}
	if text := strings.TrimSpace(run.text.String()); run.calls == 0 && text != "" {
		ts.say = append(ts.say, text)
	}
	return evs
}

// usage is a response's usage as the Responses API counts it (nil when unknown).
func usage(u *session.Usage) any {
	if u == nil {
		return nil
	}
	return map[string]any{"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens, "total_tokens": u.TotalTokens}
}

// outputTaken notes the session's taking of a call's output: it is in the conversation.
func (ts *tasks) outputTaken(e session.ConversationItem) {
	if e.Phase != session.PhaseAdded || e.Item.Type != "function_call_output" {
		return
	}
	if c := ts.calls[e.Item.CallID]; c != nil {
		c.restored, c.sent = true, true
	}
}

// outputRefused notes the session's refusal of the client's output with event id: it may be
// given again.
func (ts *tasks) outputRefused(eventID string) {
	if eventID == "" {
		return
	}
	for _, c := range ts.calls {
		if c.sent && c.answerID == eventID {
			c.sent = false
		}
	}
}

// failed is response.event carrying response.failed for run, with code and msg.
func (run *taskRun) failed(code, msg string) protocol.ServerEvent {
	return run.lifecycle("response.failed", "failed", map[string]any{"error": map[string]any{"code": code, "message": msg}})
}

// lifecycle is a run's response.created / completed / incomplete / failed: the response's
// snapshot without its input and output (Live's lifecycle events omit them), with extra fields.
func (run *taskRun) lifecycle(typ, status string, extra map[string]any) protocol.ServerEvent {
	resp := map[string]any{"id": run.id, "object": "response", "created_at": run.created, "status": status,
		"model": run.model, "error": nil, "incomplete_details": nil}
	for k, v := range extra {
		resp[k] = v
	}
	return run.stream(map[string]any{"type": typ, "response": resp})
}

// stream is ev as the run's next event: response.event with its sequence number.
func (run *taskRun) stream(ev map[string]any) protocol.ServerEvent {
	ev["sequence_number"] = run.seq
	out := responseEvent{DelegationID: run.delegationID, Event: ev}
	if run.seq == 0 {
		out.ClientEventID = run.clientEventID
	}
	run.seq++
	return out
}

// sayResults are the commands that say the finished tasks' results: each joins the
// conversation as commentary does, and is spoken at the next silence.
func (t *Translator) sayResults() []session.Command {
	var cmds []session.Command
	for _, text := range t.tasks.say {
		text = commentaryText(text)
		t.commentary = append(t.commentary, min(commentaryBudget(text), maxCommentaryTokens))
		t.deleg.ackDue = false // the result is the delegation's answer: no "I'm on it" any more
		cmds = append(cmds, &session.CreateItem{Base: session.Base{ID: t.internalID("result"), Kind: "response.event"}, Role: "system", Text: text})
	}
	t.tasks.say = nil
	return cmds
}

// maxCommentaryTokens bounds the reply that says a task's result (the session's limit).
const maxCommentaryTokens = 4096

// itemCreate is response.item.create: a function call's output for a task, checked (the call
// must be a task's, answered once), then the call and its output join the conversation.
func (ts *tasks) itemCreate(ev clientEvent, cmdID func() string) (session.Command, *protocol.Error) {
	out, werr := parseOutputItem(ev)
	if werr != nil {
		return nil, werr
	}
	c := ts.calls[out.CallID]
	switch {
	case c == nil:
		return nil, &protocol.Error{Code: "invalid_value", Param: "item.call_id", EventID: ev.id,
			Message: fmt.Sprintf("No function call of a Responses task has call_id %q.", out.CallID)}
	case c.sent:
		return nil, &protocol.Error{Code: "invalid_value", Param: "item.call_id", EventID: ev.id,
			Message: fmt.Sprintf("The call %q already has a function_call_output.", out.CallID)}
	}
	var cmds []session.Command
	if !c.restored {
		c.restored = true
		cmds = append(cmds, &session.CreateItem{Base: session.Base{ID: cmdID(), Kind: ev.typ},
			ItemType: "function_call", CallID: out.CallID, Name: c.name, Arguments: c.arguments})
	}
	c.sent, c.answerID = true, ev.id
	cmds = append(cmds, &session.CreateItem{Base: ev.base(), ItemType: "function_call_output", CallID: out.CallID, Output: *out.Output})
	return &Reply{Base: ev.base(), Commands: cmds}, nil
}

// outputItem is response.item.create's item: a function_call_output.
type outputItem struct {
	Type   string  `json:"type"`
	CallID string  `json:"call_id"`
	Output *string `json:"output"`
	ID     string  `json:"id"`
	Status string  `json:"status"`
}

// parseOutputItem checks response.item.create's item strictly, naming the param.
func parseOutputItem(ev clientEvent) (outputItem, *protocol.Error) {
	var it outputItem
	raw, ok := ev.raw["item"]
	if !ok || string(raw) == "null" {
		return it, &protocol.Error{Code: "missing_required_parameter", Param: "item", EventID: ev.id, Message: "Missing required parameter: 'item' (a function_call_output)."}
	}
	shape := obj(map[string]*node{"type": leaf, "call_id": leaf, "output": leaf, "id": leaf, "status": leaf})
	werr := checkKeys(raw, shape, "item")
	if werr == nil {
		werr = decodeStrict(raw, &it, "item")
	}
	switch {
	case werr != nil:
	case it.Type != "function_call_output":
		werr = &protocol.Error{Code: "invalid_value", Param: "item.type",
			Message: fmt.Sprintf("Invalid value for 'item.type': %q. omniserve's Responses tasks take function_call_output items.", it.Type)}
	case it.CallID == "":
		werr = &protocol.Error{Code: "missing_required_parameter", Param: "item.call_id", Message: "Missing required parameter: 'item.call_id'."}
	case it.Output == nil:
		werr = &protocol.Error{Code: "missing_required_parameter", Param: "item.output", Message: "Missing required parameter: 'item.output' (a string)."}
	}
	if werr != nil {
		werr.EventID = ev.id
	}
	return it, werr
}

// responseCreate is response.create: the task whose calls all have their outputs runs on in a
// new response; with no call waiting, a new task runs over the conversation.
func (ts *tasks) responseCreate(ev clientEvent, rc *responsesConfig) (session.Command, *protocol.Error) {
	if raw := bytes.TrimSpace(ev.raw["response"]); len(raw) > 0 && raw[0] != '{' && string(raw) != "null" {
		return nil, &protocol.Error{Code: "invalid_type", Param: "response", EventID: ev.id, Message: "'response' must be an object."}
	}
	if werr := checkKeys(ev.raw["response"], obj(map[string]*node{}), "response"); werr != nil {
		werr.EventID = ev.id
		werr.Message += " A task runs with session.delegation.responses (session.update changes it)."
		return nil, werr
	}
	delegationID, waiting := "", false
	for id, c := range ts.calls {
		if !c.sent {
			return nil, &protocol.Error{Code: "invalid_value", EventID: ev.id,
				Message: fmt.Sprintf("No tool output found for function call %s: send response.item.create with its function_call_output first.", id)}
		}
		delegationID, waiting = c.delegationID, true
	}
	if waiting {
		ts.calls = nil // answered: the next run reads them in the conversation
	}
	evs := ts.add(rc, newID("resp_"), delegationID, ev.id)
	if waiting && len(evs) == 0 {
		ts.queue[len(ts.queue)-1].next = true
	}
	return &Reply{Base: ev.base(), Events: evs}, nil
}
