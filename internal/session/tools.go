package session

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"

	"github.com/omniserve/omniserve/internal/requestclient"
)

// Tool is one entry of session.tools or response.tools. Type selects its kind; function tools
// are run by the client (the model's call goes out as a function_call item and the client
// answers with a function_call_output item). Raw keeps the object for other kinds.
type Tool struct {
	Type        string
	Name        string
	Description string
	Parameters  json.RawMessage
	Raw         json.RawMessage
}

// ToolChoice is tool_choice: Mode auto (the default) | none | required | function (Name) |
// mcp (ServerLabel, Name).
type ToolChoice struct {
	Mode        string
	Name        string
	ServerLabel string
}

// ToolsPatch is the tool fields of session.update or response.create (unset: unchanged / the
// session's).
type ToolsPatch struct {
	ToolsSet          bool
	Tools             []Tool
	ToolChoice        *ToolChoice
	ParallelToolCalls *bool
}

// set reports whether the patch names any tool field.
func (p ToolsPatch) set() bool {
	return p.ToolsSet || p.ToolChoice != nil || p.ParallelToolCalls != nil
}

// ToolSet is the effective tools of a session or response.
type ToolSet struct {
	Tools      []Tool
	Choice     ToolChoice
	Parallel   bool
	configured bool // a tool field was ever set (else the wire shows the defaults)
}

// ToolEngine is implemented by engines that run function tools: SetTools gives the stream the
// session's tools (its responses declare them and are parsed for calls), AppendToolResult adds
// a call's output to the conversation.
type ToolEngine interface {
	SetTools(ctx context.Context, spec *requestclient.ToolSpec) error
	AppendToolResult(ctx context.Context, name, output string) error
}

// SetTools implements ToolEngine.
func (e pipelineEngine) SetTools(ctx context.Context, spec *requestclient.ToolSpec) error {
	return e.d.SetTools(ctx, spec)
}

// AppendToolResult implements ToolEngine.
func (e pipelineEngine) AppendToolResult(ctx context.Context, name, output string) error {
	return e.d.AppendToolResult(ctx, name, output)
}

var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// apply returns ts with p applied; prefix names the params ("session" or "response").
func (p ToolsPatch) apply(ts ToolSet, prefix string) (ToolSet, *FieldError) {
	if !p.set() {
		return ts, nil
	}
	ts.configured = true
	if p.ToolsSet {
		seen := map[string]bool{}
		tools := make([]Tool, 0, len(p.Tools))
		for i, t := range p.Tools {
			param := fmt.Sprintf("%s.tools[%d]", prefix, i)
			// The tool-kind dispatch: function tools run here; MCP tools (issue 24 item 4) plug
			// in as their own case, with the server connection they need.
			switch t.Type {
			case "function":
				if !toolNameRE.MatchString(t.Name) {
					return ts, &FieldError{"invalid_value", param + ".name", fmt.Sprintf("tool name %q must be 1 to 64 letters, digits, _ or -", t.Name)}
				}
				if seen[t.Name] {
					return ts, &FieldError{"invalid_value", param + ".name", fmt.Sprintf("tool name %q is declared twice", t.Name)}
				}
				seen[t.Name] = true
				spec := requestclient.ToolSpec{Tools: []requestclient.Tool{{Name: t.Name, Parameters: t.Parameters}}}
				if err := requestclient.CheckTools(spec, math.MaxInt32); err != nil {
					return ts, &FieldError{"invalid_value", param + ".parameters", err.Error()}
				}
			case "mcp":
				return ts, &FieldError{"unsupported_tools", param + ".type", "mcp tools are not supported by this server build (function tools are)"}
			default:
				return ts, &FieldError{"invalid_value", param + ".type", fmt.Sprintf("unsupported tool type %q (function)", t.Type)}
			}
			tools = append(tools, t)
		}
		ts.Tools = tools
	}
	if p.ToolChoice != nil {
		ts.Choice = *p.ToolChoice
	}
	if p.ParallelToolCalls != nil {
		ts.Parallel = *p.ParallelToolCalls
	}
	switch ts.Choice.Mode {
	case "", "auto", "none", "required":
	case "function":
		if !ts.has(ts.Choice.Name) {
			return ts, &FieldError{"invalid_value", prefix + ".tool_choice.name", fmt.Sprintf("tool_choice names function %q, which is not in tools", ts.Choice.Name)}
		}
	case "mcp":
		return ts, &FieldError{"unsupported_tools", prefix + ".tool_choice", "mcp tools are not supported by this server build"}
	}
	if ts.Choice.Mode == "required" && len(ts.Tools) == 0 {
		return ts, &FieldError{"invalid_value", prefix + ".tool_choice", "tool_choice \"required\" needs at least one tool"}
	}
	return ts, nil
}

func (ts ToolSet) has(name string) bool {
	for _, t := range ts.Tools {
		if t.Type == "function" && t.Name == name {
			return true
		}
	}
	return false
}

// spec is the engine's view of ts: nil when the model may call nothing.
func (ts ToolSet) spec() *requestclient.ToolSpec {
	if len(ts.Tools) == 0 || ts.Choice.Mode == "none" {
		return nil
	}
	out := &requestclient.ToolSpec{Choice: requestclient.ToolChoiceAuto, Parallel: ts.Parallel}
	switch ts.Choice.Mode {
	case "required":
		out.Choice = requestclient.ToolChoiceRequired
	case "function":
		out.Choice, out.Function = requestclient.ToolChoiceFunction, ts.Choice.Name
	}
	for _, t := range ts.Tools {
		if t.Type == "function" {
			out.Tools = append(out.Tools, requestclient.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
		}
	}
	return out
}

// key identifies what spec gives the engine.
func (ts ToolSet) key() string {
	s := ts.spec()
	if s == nil {
		return ""
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// toolsWire is session.tools as the client declared them.
func (ts ToolSet) toolsWire() []any {
	out := make([]any, 0, len(ts.Tools))
	for _, t := range ts.Tools {
		w := map[string]any{"type": t.Type, "name": t.Name}
		if t.Description != "" {
			w["description"] = t.Description
		}
		if t.Parameters != nil {
			w["parameters"] = t.Parameters
		}
		out = append(out, w)
	}
	return out
}

// choiceWire is tool_choice in the dialect's shape (beta: a function choice is its name).
func (ts ToolSet) choiceWire(beta bool) any {
	switch ts.Choice.Mode {
	case "":
		return "auto"
	case "function":
		if beta {
			return ts.Choice.Name
		}
		return map[string]any{"type": "function", "name": ts.Choice.Name}
	}
	return ts.Choice.Mode
}

// syncTools gives the engine the session's tools when they changed or the engine is new, in
// order with the session's other engine jobs.
func (s *Session) syncTools() {
	if s.engine == nil {
		return
	}
	key := s.cfg.Tools.key()
	if s.toolsEngine != s.engine {
		// A new stream has no tools: nothing to give it while the session has none.
		s.toolsEngine, s.toolsKey = s.engine, ""
	}
	if s.toolsKey == key {
		return
	}
	te, ok := s.engine.(ToolEngine)
	if !ok {
		if key != "" {
			s.sendError("unsupported_tools", "this engine does not run tools", "", "session.tools")
		}
		return
	}
	s.toolsKey = key
	spec := s.cfg.Tools.spec()
	if !s.submitJob(job{run: func(ctx context.Context) jobResult {
		return jobResult{err: te.SetTools(ctx, spec), errCode: "runtime_append_failed"}
	}}) {
		s.toolsKey = "\x00" // not applied: the next sync tries again
		s.sendError("input_backpressure", "too many pending engine jobs; the session's tools were not applied yet", "", "session.tools")
	}
}

// onToolCall announces a call of the model as a function_call output item with the documented
// sequence: output_item.added, conversation.item.added, function_call_arguments.delta / .done,
// conversation.item.done, output_item.done. The item follows the response's message item.
func (s *Session) onToolCall(r *response, c *requestclient.ToolCall) {
	if c == nil {
		return
	}
	s.m.observeToolCall()
	it := &item{ID: newItemID(), Type: "function_call", Status: "in_progress", ResponseID: r.id, CallID: c.ID, Name: c.Name}
	idx := 1 + len(r.calls)
	r.calls = append(r.calls, it)
	prev := s.lastItemID()
	if !r.outOfBand {
		s.items = append(s.items, it)
	}
	added := it.wire(s.opts.Beta)
	s.send(Event{Type: "response.output_item.added", Epoch: r.epoch, Model: true, Fields: map[string]any{
		"response_id": r.id, "output_index": idx, "item": added}})
	if !r.outOfBand {
		s.send(Event{Type: "conversation.item.added", Epoch: r.epoch, Model: true, Fields: map[string]any{
			"previous_item_id": prev, "item": added}})
	}
	base := func() map[string]any {
		return map[string]any{"response_id": r.id, "item_id": it.ID, "output_index": idx, "call_id": c.ID}
	}
	f := base()
	f["delta"] = c.Arguments
	s.send(Event{Type: "response.function_call_arguments.delta", Epoch: r.epoch, Model: true, Fields: f})
	it.Arguments, it.Status = c.Arguments, "completed"
	f = base()
	f["arguments"] = c.Arguments
	if !s.opts.Beta {
		f["name"] = c.Name // GA only
	}
	s.send(Event{Type: "response.function_call_arguments.done", Epoch: r.epoch, Model: true, Fields: f})
	w := it.wire(s.opts.Beta)
	if !r.outOfBand {
		s.send(Event{Type: "conversation.item.done", Epoch: r.epoch, Model: true, Fields: map[string]any{
			"previous_item_id": prev, "item": w}})
	}
	s.send(Event{Type: "response.output_item.done", Epoch: r.epoch, Model: true, Fields: map[string]any{
		"response_id": r.id, "output_index": idx, "item": w}})
}

// callsWire is the response's function_call items, for response.done's output.
func (r *response) callsWire(beta bool) []any {
	out := make([]any, 0, len(r.calls))
	for _, it := range r.calls {
		out = append(out, it.wire(beta))
	}
	return out
}

// findCall is the function_call item of callID in the conversation, or nil.
func (s *Session) findCall(callID string) *item {
	for _, it := range s.items {
		if it.Type == "function_call" && it.CallID == callID {
			return it
		}
	}
	return nil
}

func (s *Session) findCallOutput(callID string) *item {
	for _, it := range s.items {
		if it.Type == "function_call_output" && it.CallID == callID {
			return it
		}
	}
	return nil
}

// handleToolOutput is conversation.item.create with a function_call_output item: the result of
// a call the model made in this conversation. It joins the conversation as that call's result
// (named by the call's function, so other items between them keep the pairing), and a
// response.create then continues from it; no response starts by itself.
func (s *Session) handleToolOutput(c *CreateItem) {
	call := s.findCall(c.CallID)
	if call == nil {
		s.sendError("invalid_value", fmt.Sprintf("no function_call item with call_id %q is in the conversation", c.CallID), c.ID, "item.call_id")
		return
	}
	if s.findCallOutput(c.CallID) != nil {
		s.sendError("invalid_value", fmt.Sprintf("the call %q already has a function_call_output", c.CallID), c.ID, "item.call_id")
		return
	}
	if !s.ensureEngine(c.ID) {
		return
	}
	te, ok := s.engine.(ToolEngine)
	if !ok {
		s.sendError("unsupported_tools", "this engine does not run tools", c.ID, "item.type")
		return
	}
	id := c.ItemID
	if id == "" {
		id = newItemID()
	}
	if s.findItem(id) != nil {
		s.sendError("item_exists", fmt.Sprintf("item %q already exists", id), c.ID, "item.id")
		return
	}
	if c.PreviousItemID != "" && c.PreviousItemID != "root" && s.findItem(c.PreviousItemID) == nil {
		s.sendError("invalid_value", fmt.Sprintf("previous_item_id %q does not exist", c.PreviousItemID), c.ID, "previous_item_id")
		return
	}
	if !s.canSubmitJob() {
		s.sendError("input_backpressure", "too many pending engine jobs; the item was not added", c.ID, "item")
		return
	}
	it := &item{ID: id, Type: "function_call_output", Status: "completed", CallID: c.CallID, Output: c.Output}
	s.insertItem(it, c.PreviousItemID)
	s.sendItemAdded(it, s.epoch, false)
	s.sendItemDone(it, s.epoch)
	s.pendingIn++ // a response.create may answer it
	s.engine.MarkTurnArrival(s.m.cfg.WallClock())
	name, output := call.Name, c.Output
	s.submitJob(job{run: func(ctx context.Context) jobResult { // cannot fail: canSubmitJob above
		return jobResult{err: te.AppendToolResult(ctx, name, output), errCode: "runtime_append_failed"}
	}})
}

// ToolCallMetrics is implemented by metrics that count the model's tool calls
// (metrics.Collectors: omniserve_tool_calls_total).
type ToolCallMetrics interface {
	CountToolCall(api string)
}

func (m *Manager) observeToolCall() {
	if tm, ok := m.cfg.Metrics.(ToolCallMetrics); ok {
		tm.CountToolCall("realtime")
	}
}
