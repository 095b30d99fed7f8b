package session

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// Function tools (session.tools, response.create tools): the model's calls become function_call
// items; the client answers each with a function_call_output item and asks for the next
// response. The calls and their results join the engine's conversation in the model's own tool
// markup (internal/stage/tools.go); none of it is ever spoken.

// ToolChoice is tool_choice: Mode auto (default), none, required, function with Function the
// forced function's name, or mcp with ServerLabel and (optionally) Function the forced MCP
// tool's name (mcp_call.go).
type ToolChoice struct {
	Mode        string
	Function    string
	ServerLabel string
}

var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// checkTools validates a tool set and a choice over it; param is "session" or "response".
func checkTools(tools []duplex.Tool, choice ToolChoice, maxTokens int, param string) *FieldError {
	seen := map[string]bool{}
	for i, t := range tools {
		p := fmt.Sprintf("%s.tools[%d].name", param, i)
		if !toolNameRE.MatchString(t.Name) {
			return &FieldError{"invalid_value", p, fmt.Sprintf("invalid function name %q: 1 to 64 characters of a-z, A-Z, 0-9, _ and -", t.Name)}
		}
		if seen[t.Name] {
			return &FieldError{"invalid_value", p, fmt.Sprintf("duplicate function name %q", t.Name)}
		}
		seen[t.Name] = true
		if err := requestclient.CheckTools(duplex.ToolSpec{Tools: []duplex.Tool{t}}, maxOutputTokensLimit); err != nil {
			return &FieldError{"invalid_value", fmt.Sprintf("%s.tools[%d].parameters", param, i), fmt.Sprintf("invalid schema for function %q: %v", t.Name, err)}
		}
	}
	if choice.Mode == "mcp" {
		return nil // the MCP tools are checked when a response forces one (toolstate.go specFor)
	}
	if choice.Mode == duplex.ToolChoiceFunction && !seen[choice.Function] {
		return &FieldError{"invalid_value", param + ".tool_choice", fmt.Sprintf("tool_choice names function %q, which is not among the tools", choice.Function)}
	}
	if (choice.Mode == duplex.ToolChoiceRequired || choice.Mode == duplex.ToolChoiceFunction) && len(tools) == 0 {
		return &FieldError{"invalid_value", param + ".tool_choice", "tool_choice " + choice.Mode + " needs tools"}
	}
	spec := toolSpec(tools, choice, true)
	if spec != nil && maxTokens > 0 {
		if err := requestclient.CheckTools(*spec, maxTokens); err != nil {
			return &FieldError{"invalid_value", param + ".max_output_tokens", fmt.Sprintf("too small for a complete forced call: %v", err)}
		}
	}
	return nil
}

// toolSpec is what the engine gets for a reply: nil when no call may be made.
func toolSpec(tools []duplex.Tool, choice ToolChoice, parallel bool) *duplex.ToolSpec {
	if len(tools) == 0 || choice.Mode == duplex.ToolChoiceNone {
		return nil
	}
	mode := choice.Mode
	if mode == "" {
		mode = duplex.ToolChoiceAuto
	}
	return &duplex.ToolSpec{Tools: tools, Choice: mode, Function: choice.Function, Parallel: parallel}
}

// sessionTools is the session's tools (cfg) for a response that declares none of its own.
func (t *toolState) sessionTools(cfg Config) *duplex.ToolSpec {
	spec, _, fe := t.specFor(cfg.MCP, cfg.Tools, cfg.ToolChoice, true, true, "session")
	if fe != nil {
		// tool_choice forces an MCP tool not listed (yet): the engine's own turns choose.
		spec, _, _ = t.specFor(cfg.MCP, cfg.Tools, ToolChoice{Mode: duplex.ToolChoiceAuto}, true, true, "session")
	}
	return spec
}

// emitFunctionCall turns one complete call of the model into a function_call item: added,
// its arguments (one delta: the call arrives whole), done.
func (t *toolState) emitFunctionCall(r *response, c *duplex.ToolCall) {
	t.io.countCall()
	it := &item{ID: newItemID(), Type: "function_call", Status: "in_progress", ResponseID: r.id,
		CallID: c.ID, Name: c.Name}
	idx := 1 + len(r.calls) // the message item is output 0
	r.calls = append(r.calls, it)
	t.io.send(r.outputItemAdded(idx, it))
	if !r.outOfBand {
		t.io.conv.insert(it, "")
		t.io.send(t.io.conv.added(it, r.epoch, true))
	}
	t.io.send(Event{Epoch: r.epoch, Model: true, Effect: CallArguments{Phase: PhaseDelta,
		ResponseID: r.id, ItemID: it.ID, OutputIndex: idx, CallID: c.ID, Text: c.Arguments}})
	it.Arguments, it.Status, it.CalledAt = c.Arguments, "completed", t.io.wallNow()
	t.io.send(Event{Epoch: r.epoch, Model: true, Effect: CallArguments{Phase: PhaseDone,
		ResponseID: r.id, ItemID: it.ID, OutputIndex: idx, CallID: c.ID, Text: c.Arguments, Name: c.Name}})
	t.sendOutputItemDone(r, idx, it, true)
}

// outputItemAdded is response.output_item.added for a tool item of r at output idx.
func (r *response) outputItemAdded(idx int, it *item) Event {
	return Event{Epoch: r.epoch, Model: true, Effect: OutputItem{Phase: PhaseAdded, ResponseID: r.id, OutputIndex: idx, Item: it.item()}}
}

// sendOutputItemDone ends a tool item of r at output idx: conversation.item.done (when it is in
// the conversation) and response.output_item.done. model marks them model output (dropped once
// the response's epoch is over); the end of an MCP call, which the server itself ran, is not.
func (t *toolState) sendOutputItemDone(r *response, idx int, it *item, model bool) {
	if !r.outOfBand && t.io.conv.find(it.ID) != nil {
		t.io.send(t.io.conv.done(it, r.epoch, model))
	}
	t.io.send(Event{Epoch: r.epoch, Model: model, Effect: OutputItem{Phase: PhaseDone, ResponseID: r.id, OutputIndex: idx, Item: it.item()}})
}

// createFunctionOutput is conversation.item.create with a function_call_output: the result of
// an earlier call joins the conversation (the engine reads it in the template's tool-result
// form). true: it counts as input a response.create may answer (false: the client was told why
// not).
func (t *toolState) createFunctionOutput(c *CreateItem, epoch int) bool {
	conv := t.io.conv
	call := conv.findCall(c.CallID)
	if call == nil {
		t.io.sendError("invalid_value", fmt.Sprintf("no function_call item has call_id %q", c.CallID), c.ID, "item.call_id")
		return false
	}
	if it := conv.callOutput(c.CallID); it != nil {
		// One result per call: a second would leave the model two answers to one question.
		t.io.sendError("invalid_value", fmt.Sprintf("the call %q already has a function_call_output (item %s)", c.CallID, it.ID), c.ID, "item.call_id")
		return false
	}
	// Measured before the engine is opened for it (admission.go).
	rule := t.io.rule()
	tokens, fe := measureText(rule, "item.output", "tool", c.Output)
	if fe != nil {
		t.io.sendError(fe.Code, fe.Message, c.ID, fe.Param)
		return false
	}
	id, ok := t.io.newItem(c) // opens the engine
	if !ok {
		return false
	}
	if t.io.room() < 1 {
		t.io.sendError("input_backpressure", "too many pending engine jobs; the item was not added", c.ID, "item")
		return false
	}
	if fe := t.io.budget().take(rule, "item.output", tokens); fe != nil {
		t.io.sendError(fe.Code, fe.Message, c.ID, fe.Param)
		return false
	}
	// Timed at its arrival, before its events go out (a client that has seen them may act).
	t.answered.time(call, t.io.wallNow())
	it := &item{ID: id, Type: "function_call_output", Status: "completed", CallID: c.CallID, Output: c.Output}
	conv.insert(it, "")
	t.io.send(conv.added(it, epoch, false))
	t.io.send(conv.done(it, epoch, false))
	eng, turn := t.io.engine()
	out := c.Output
	t.io.submit(job{run: func(ctx context.Context) jobResult { // cannot fail: room above
		return jobResult{err: eng.AppendText(ctx, turn, "tool", out), errCode: "runtime_append_failed"}
	}})
	return true
}

// createFunctionCall is conversation.item.create with a function_call: a call the model made
// earlier, restored into the conversation (a client rebuilding a conversation's history sends
// the call, then its function_call_output). The engine reads it as the assistant's call in the
// chat template's tool-call form. It is no input a response answers: its output is.
func (t *toolState) createFunctionCall(c *CreateItem, epoch int) {
	conv := t.io.conv
	if it := conv.findCall(c.CallID); it != nil {
		t.io.sendError("invalid_value", fmt.Sprintf("the conversation already has a function_call with call_id %q (item %s)", c.CallID, it.ID), c.ID, "item.call_id")
		return
	}
	call, err := json.Marshal(duplex.ToolCall{ID: c.CallID, Name: c.Name, Arguments: c.Arguments})
	if err != nil { // a string and valid JSON text: cannot fail
		t.io.sendError("invalid_value", err.Error(), c.ID, "item.arguments")
		return
	}
	rule := t.io.rule()
	tokens, fe := measureText(rule, "item.arguments", duplex.RoleToolCall, string(call))
	if fe != nil {
		t.io.sendError(fe.Code, fe.Message, c.ID, fe.Param)
		return
	}
	id, ok := t.io.newItem(c) // opens the engine
	if !ok {
		return
	}
	if t.io.room() < 1 {
		t.io.sendError("input_backpressure", "too many pending engine jobs; the item was not added", c.ID, "item")
		return
	}
	if fe := t.io.budget().take(rule, "item.arguments", tokens); fe != nil {
		t.io.sendError(fe.Code, fe.Message, c.ID, fe.Param)
		return
	}
	it := &item{ID: id, Type: "function_call", Status: "completed", CallID: c.CallID, Name: c.Name, Arguments: c.Arguments}
	conv.insert(it, "") // appended, as the engine's conversation is
	t.io.send(conv.added(it, epoch, false))
	t.io.send(conv.done(it, epoch, false))
	eng, turn := t.io.engine()
	t.io.submit(job{run: func(ctx context.Context) jobResult { // cannot fail: room above
		return jobResult{err: eng.AppendText(ctx, turn, duplex.RoleToolCall, string(call)), errCode: "runtime_append_failed"}
	}})
}

// maxToolCallsAnswered bounds the answered calls kept for the next response's statistics (a
// client answering calls with no response after them); later ones are not timed.
const maxToolCallsAnswered = 64

// answeredCalls are the function calls the client answered since the last response began: the
// next response's turn counts them, at most maxToolCallsAnswered.
type answeredCalls []metrics.ToolCallStats

// time times the client's answer to call (arguments done → its function_call_output, at now)
// for the next response's turn: the follow-up the output is for.
func (a *answeredCalls) time(call *item, now float64) {
	if call.CalledAt <= 0 || len(*a) >= maxToolCallsAnswered {
		return
	}
	*a = append(*a, metrics.ToolCallStats{Kind: metrics.ToolKindFunction,
		Name: call.Name, CallID: call.CallID, Start: call.CalledAt, DurationMs: max(now-call.CalledAt, 0) * 1000})
}

// take hands the answered calls to a response that begins and starts over.
func (a *answeredCalls) take() []metrics.ToolCallStats {
	out := *a
	*a = nil
	return out
}

// resolveTools sets a response's tools: its own (tools, tool_choice, parallel_tool_calls)
// over the session's (cfg); defaultMax is the server's max_output_tokens for "inf".
func (t *toolState) resolveTools(cfg Config, c *CreateResponse, o *respOptions, defaultMax int) *FieldError {
	tools, choice, parallel := responseTools(cfg, c)
	own := c.ToolsSet || c.ToolChoice != nil
	limit := o.maxTokens
	if limit <= 0 {
		limit = defaultMax
	}
	param := "session"
	if own {
		param = "response"
		if fe := checkTools(tools, choice, limit, "response"); fe != nil {
			return fe
		}
	} else if fe := checkForcedBudget(tools, choice, c.MaxOutputTokens, limit); fe != nil {
		return fe
	}
	spec, refs, fe := t.specFor(cfg.MCP, tools, choice, parallel, !c.ToolsSet, param)
	if fe != nil {
		return fe
	}
	if spec != nil && choice.Mode == "mcp" && limit > 0 {
		// As checkTools does for a forced function: the forced MCP call must fit the reply.
		if err := requestclient.CheckTools(*spec, limit); err != nil {
			return &FieldError{"invalid_value", param + ".max_output_tokens", fmt.Sprintf("too small for a complete forced call: %v", err)}
		}
	}
	o.tools, o.mcpRefs = spec, refs
	return nil
}

// checkForcedBudget refuses a response whose own max_output_tokens (max, when set) is too small
// for a complete call that the session's tool_choice forces: named as chat names max_tokens,
// never an engine_error once the call is cut short.
func checkForcedBudget(tools []duplex.Tool, choice ToolChoice, max *int, limit int) *FieldError {
	if max == nil || limit <= 0 || (choice.Mode != duplex.ToolChoiceRequired && choice.Mode != duplex.ToolChoiceFunction) {
		return nil
	}
	spec := toolSpec(tools, choice, true)
	if spec == nil {
		return nil
	}
	if err := requestclient.CheckTools(*spec, limit); err != nil {
		return &FieldError{"invalid_value", "response.max_output_tokens", fmt.Sprintf("too small for a complete forced call: %v", err)}
	}
	return nil
}

// responseTools are a response's function tools, tool choice and parallel_tool_calls: its own
// where response.create c sets them, else the session's (cfg).
func responseTools(cfg Config, c *CreateResponse) ([]duplex.Tool, ToolChoice, bool) {
	tools, choice, parallel := cfg.Tools, cfg.ToolChoice, true
	if c.ToolsSet {
		tools = c.Tools
	}
	if c.ToolChoice != nil {
		choice = *c.ToolChoice
	}
	if c.ParallelToolCalls != nil {
		parallel = *c.ParallelToolCalls
	}
	return tools, choice, parallel
}

// createItem takes the tool items of conversation.item.create (a function call's output, an
// MCP approval's answer); handled is false for a message. A function output counts as input a
// response may answer (rs.pendingIn); an approval may return the follow-up response the actor
// starts.
func (t *toolState) createItem(c *CreateItem, rs *responses, epoch int) (handled bool, f *followUp) {
	switch c.ItemType {
	case "function_call":
		t.createFunctionCall(c, epoch)
	case "function_call_output":
		if t.createFunctionOutput(c, epoch) {
			rs.pendingIn++
		}
	case "mcp_approval_response":
		f = t.answerApproval(c, rs.resp, epoch)
	default:
		return false, nil
	}
	return true, f
}
