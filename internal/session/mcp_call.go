package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/mcpclient"
	"github.com/omniserve/omniserve/internal/metrics"
)

// MCP tool calls. The listed tools of the session's MCP servers are offered to the model next
// to its function tools; a call of one becomes an mcp_call item that the session runs itself on
// the server's connection (a goroutine of mcpState, never the actor), or, when the tool's
// require_approval matches, an mcp_approval_request item the client answers with an
// mcp_approval_response. The call's output (or error) joins the engine's conversation as the
// call's tool result, and the session carries on by itself with a follow-up response that
// reads it.
//
// Shape of the turn: a response whose model made MCP calls stays open until they finish (their
// items complete in it), then ends, and a follow-up response speaks about the results. An
// approved call runs in a response of its own that the session starts on the approval, and the
// model's follow-up comes in that same response, after the call.

// mcpRef names an MCP tool the model was offered: its server and its name there.
type mcpRef struct{ label, name string }

// mcpResp is a response's MCP state (response.mcp).
type mcpResp struct {
	// refs maps the tool names the model was offered to MCP tools; nil: the session's (an
	// engine-started turn), empty: none (a response with its own tools).
	refs map[string]mcpRef
	// pending counts the response's calls still running: the response does not complete
	// before they finish.
	pending int
	// followUp: a call finished after the model's reply, so a follow-up response reads it.
	followUp bool
	// start runs the model's reply of a response that first ran an approved call; nil once
	// started (or for a response the model began).
	start func()
	// depth counts the follow-ups before this response since the client's own response.
	depth int
}

// mcpItem is what mcp_call, mcp_approval_request and mcp_approval_response items carry besides
// item's shared fields (ServerLabel, Name, Arguments, Status).
type mcpItem struct {
	Output            *string
	Error             map[string]any
	ApprovalRequestID string
	Approve           bool
	Reason            string
	// AnsweredBy is the mcp_approval_response item that answered a request ("" = none yet).
	AnsweredBy string
}

// mcpCallResult is a finished call, reported to the actor on mcpState.results.
type mcpCallResult struct {
	itemID string
	output string
	err    error
	dur    time.Duration
}

// mcpCall is a running call.
type mcpCall struct {
	r       *response
	it      *item
	idx     int
	cancel  context.CancelFunc
	started time.Time
	// startedAt is started on the statistics clock (its turn's ToolCallStats).
	startedAt float64
}

// maxMCPCallsInFlight bounds the calls one session runs at once (parallel tool calls); a call
// past it fails at once.
const maxMCPCallsInFlight = 4

// maxMCPRounds bounds the follow-ups the session starts by itself in a row: the follow-up
// after that many offers no tools, so a model that keeps calling cannot loop forever.
const maxMCPRounds = 8

// forcedChoice reports a tool_choice that forces a call.
func forcedChoice(c ToolChoice) bool {
	return c.Mode == duplex.ToolChoiceRequired || c.Mode == duplex.ToolChoiceFunction || c.Mode == "mcp"
}

// checkMCPChoice checks at session.update that a tool_choice {type: "mcp"} names one of the
// session's MCP servers (its tool is checked when a response forces it: listing is async).
func checkMCPChoice(cfg Config) *FieldError {
	if cfg.ToolChoice.Mode != "mcp" {
		return nil
	}
	for _, t := range cfg.MCP {
		if t.ServerLabel == cfg.ToolChoice.ServerLabel {
			return nil
		}
	}
	return &FieldError{"invalid_value", "session.tool_choice.server_label",
		fmt.Sprintf("tool_choice names MCP server %q, which is not among the session's MCP tools", cfg.ToolChoice.ServerLabel)}
}

// needsApproval evaluates require_approval (checked by checkRequireApproval) for a tool:
// absent is "always", as OpenAI's default; a filter object asks when "always" matches the
// tool, not when "never" does, and otherwise asks.
func needsApproval(raw json.RawMessage, name string, readOnly bool) bool {
	if len(raw) == 0 {
		return true
	}
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		return mode != "never"
	}
	var obj struct {
		Always json.RawMessage `json:"always"`
		Never  json.RawMessage `json:"never"`
	}
	_ = json.Unmarshal(raw, &obj)
	if f, _ := mcpclient.ParseFilter(obj.Always); f != nil && f.Allows(name, readOnly) {
		return true
	}
	if f, _ := mcpclient.ParseFilter(obj.Never); f != nil && f.Allows(name, readOnly) {
		return false
	}
	return true
}

// readOnlyTool reports the listed tool's readOnlyHint annotation.
func readOnlyTool(srv *mcpServer, name string) bool {
	for _, t := range srv.tools {
		if t.Name == name && len(t.Annotations) > 0 {
			var a struct {
				ReadOnlyHint bool `json:"readOnlyHint"`
			}
			_ = json.Unmarshal(t.Annotations, &a)
			return a.ReadOnlyHint
		}
	}
	return false
}

// mcpRefOf maps a call of the model in response r to the MCP tool it names, if it does; a
// turn the engine started by itself (no refs of its own) has the session's tools (cfg).
func (t *toolState) mcpRefOf(r *response, cfg Config, name string) (mcpRef, bool) {
	refs := r.mcp.refs
	if refs == nil {
		_, refs, _ = t.specFor(cfg.MCP, cfg.Tools, ToolChoice{Mode: duplex.ToolChoiceAuto}, true, true, "session")
	}
	ref, ok := refs[name]
	return ref, ok
}

// emitMCPCall turns a call of the model that names an MCP tool into an mcp_call item it runs,
// or an mcp_approval_request item when the tool needs the client's approval. false: the call
// names no MCP tool (a function call).
func (t *toolState) emitMCPCall(r *response, c *duplex.ToolCall, cfg Config) bool {
	ref, ok := t.mcpRefOf(r, cfg, c.Name)
	if !ok {
		return false
	}
	t.io.countCall()
	if t.mcp.needsApproval(ref) {
		// An mcp_approval_request item instead of the call: the client answers it.
		it := &item{ID: newItemID(), Type: "mcp_approval_request", Status: "completed", ResponseID: r.id,
			ServerLabel: ref.label, Name: ref.name, Arguments: c.Arguments, MCP: &mcpItem{}}
		t.sendOutputItemDone(r, t.addCallItem(r, it), it, true)
		return true
	}
	it := &item{ID: newItemID(), Type: "mcp_call", Status: "in_progress", ResponseID: r.id,
		ServerLabel: ref.label, Name: ref.name, MCP: &mcpItem{}}
	t.emitCallItem(r, it, c.Arguments)
	return true
}

// addCallItem adds a call's item to response r (response.output_item.added, and the
// conversation unless the response is out of band) and returns its output index.
func (t *toolState) addCallItem(r *response, it *item) int {
	idx := 1 + len(r.calls)
	r.calls = append(r.calls, it)
	t.io.send(r.outputItemAdded(idx, it))
	if !r.outOfBand {
		t.io.conv.insert(it, "")
		t.io.send(t.io.conv.added(it, r.epoch, true))
	}
	return idx
}

// needsApproval reports whether a call of ref waits for the client's approval (its server's
// require_approval; a server no longer listed needs none: the call fails as not connected).
func (m *mcpState) needsApproval(ref mcpRef) bool {
	srv := m.servers[ref.label]
	return srv != nil && needsApproval(srv.tool.RequireApproval, ref.name, readOnlyTool(srv, ref.name))
}

// emitCallItem adds the mcp_call item it to the response (added, its arguments in one delta:
// the call arrives whole, done, in_progress) and runs the call.
func (t *toolState) emitCallItem(r *response, it *item, args string) {
	idx := t.addCallItem(r, it)
	t.io.send(Event{Epoch: r.epoch, Model: true, Effect: CallArguments{Phase: PhaseDelta, MCP: true,
		ResponseID: r.id, ItemID: it.ID, OutputIndex: idx, Text: args}})
	it.Arguments = args
	t.io.send(Event{Epoch: r.epoch, Model: true, Effect: CallArguments{Phase: PhaseDone, MCP: true,
		ResponseID: r.id, ItemID: it.ID, OutputIndex: idx, Text: args}})
	t.io.send(Event{Epoch: r.epoch, Effect: MCPCall{Phase: PhaseInProgress, OutputIndex: idx, ItemID: it.ID}})
	// The call runs on a goroutine of mcpState; its result comes back to the actor
	// (handleResult). A call that cannot start fails at once.
	c := &mcpCall{r: r, it: it, idx: idx}
	r.mcp.pending++
	if err := t.mcp.start(c, t.io.wallNow()); err != nil {
		t.finishMCPCall(c, "", err, -1)
		t.io.afterCall(r)
	}
}

// start runs call c on a goroutine of its own (at most maxMCPCallsInFlight at once); its
// result comes back on results. wallNow stamps its start for the turn's record. The error says
// why it could not start.
func (m *mcpState) start(c *mcpCall, wallNow float64) error {
	srv := m.servers[c.it.ServerLabel]
	switch {
	case srv == nil || srv.conn == nil:
		return &mcpclient.Error{Kind: mcpclient.KindProtocol,
			Message: fmt.Sprintf("MCP server %q is not connected (its tool was removed or its listing failed)", c.it.ServerLabel)}
	case len(m.calls) >= maxMCPCallsInFlight:
		return &mcpclient.Error{Kind: mcpclient.KindProtocol,
			Message: fmt.Sprintf("more than %d MCP calls at once in one session", maxMCPCallsInFlight)}
	}
	ctx, cancel := context.WithCancel(m.ctx)
	c.cancel, c.started, c.startedAt = cancel, time.Now(), wallNow
	m.calls[c.it.ID] = c
	conn, name, args, id := srv.conn, c.it.Name, json.RawMessage(c.it.Arguments), c.it.ID
	results, sessionCtx := m.results, m.ctx
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer cancel()
		start := time.Now()
		out, err := conn.Call(ctx, name, args)
		res := mcpResult{call: &mcpCallResult{itemID: id, output: out, err: err, dur: time.Since(start)}}
		select {
		case results <- res:
		case <-sessionCtx.Done():
		}
	}()
	return nil
}

// takeCall removes the running call of item id (nil when its response already ended it) and
// stops its context.
func (m *mcpState) takeCall(id string) *mcpCall {
	c := m.calls[id]
	if c == nil {
		return nil
	}
	delete(m.calls, id)
	c.cancel()
	return c
}

// takeCallsOf removes and stops the running calls of response r.
func (m *mcpState) takeCallsOf(r *response) []*mcpCall {
	var out []*mcpCall
	for id, c := range m.calls {
		if c.r == r {
			out = append(out, m.takeCall(id))
		}
	}
	return out
}

// outcome completes c's item with the call's output, or fails it with err; it returns the
// result the engine's conversation gets, the failure kind for the turn's record ("" =
// completed, "cancelled" = the response ended first) with the error's kind and message, and
// the call's figures (d < 0: it never reached its server, stamped wallNow).
func (c *mcpCall) outcome(output string, err error, d time.Duration, wallNow float64) (result, failure, kind, msg string, st metrics.ToolCallStats) {
	it := c.it
	result = output
	if err == nil {
		it.Status = "completed"
		it.MCP.Output = &output
	} else {
		kind, msg = mcpclient.KindProtocol, err.Error()
		var me *mcpclient.Error
		if errors.As(err, &me) {
			kind, msg = me.Kind, me.Message
		}
		failure = kind
		if errors.Is(err, errMCPCallCancelled) {
			failure = "cancelled"
		}
		it.Status = "failed"
		it.MCP.Error = map[string]any{"type": kind, "message": msg}
		if me != nil && me.Kind != mcpclient.KindTool {
			it.MCP.Error["code"] = me.Code
		}
		result = fmt.Sprintf("error (%s): %s", kind, msg)
	}
	// The call's figures join its response's turn record, which feeds the turn's tables,
	// Prometheus and its trace (metrics.ToolCallStats).
	st = metrics.ToolCallStats{Kind: metrics.ToolKindMCP, ServerLabel: it.ServerLabel, Name: it.Name, CallID: it.ID,
		Start: c.startedAt, DurationMs: float64(d) / float64(time.Millisecond), Error: failure}
	if d < 0 || c.startedAt == 0 {
		st.Start, st.DurationMs = wallNow, -1 // never reached its server
	}
	return result, failure, kind, msg, st
}

// finishMCPCall completes the call's item with its output, or fails it with its error and an
// error event saying why; the output (or the error) joins the engine's conversation as the
// call's result unless the response was cancelled.
func (t *toolState) finishMCPCall(c *mcpCall, output string, err error, d time.Duration) {
	r, it := c.r, c.it
	r.mcp.pending--
	result, failure, kind, msg, st := c.outcome(output, err, d, t.io.wallNow())
	if err == nil {
		t.io.send(Event{Epoch: r.epoch, Effect: MCPCall{Phase: PhaseCompleted, OutputIndex: c.idx, ItemID: it.ID}})
	} else {
		t.io.log.Info("mcp call failed", zap.String("server_label", it.ServerLabel), zap.String("tool", it.Name),
			zap.String("error_type", kind), zap.Error(err))
		t.io.send(Event{Epoch: r.epoch, Effect: MCPCall{Phase: PhaseFailed, OutputIndex: c.idx, ItemID: it.ID}})
		if failure != "cancelled" {
			// A cancelled call was the client's doing (response.cancel, barge-in, close).
			t.io.sendError("mcp_call_failed", fmt.Sprintf("the call of tool %q on MCP server %q failed (%s): %s", it.Name, it.ServerLabel, kind, msg), "", "")
		}
	}
	r.toolCalls = append(r.toolCalls, st)
	t.sendOutputItemDone(r, c.idx, it, false)
	if errors.Is(err, errMCPCallCancelled) || r.outOfBand {
		return // the model's call left the engine's conversation with its cancelled reply
	}
	t.appendToolResult(result)
	if r.mcp.start == nil {
		r.mcp.followUp = true
	}
}

// errMCPCallCancelled fails a call whose response ended before it finished.
var errMCPCallCancelled = errors.New("the response ended (cancelled, interrupted or closed) before the call finished")

// afterCall is what a response does when one of its MCP calls ended (its result in, active
// whether it is still the active response): nothing while other calls run or once it is no
// longer active; else its model reply starts (start, taken) if it waited for the call, or its
// pacing goes on (pace: a finished response may complete).
func (m *mcpResp) afterCall(active bool) (start func(), pace bool) {
	if !active || m.pending > 0 {
		return nil, false
	}
	if start = m.start; start != nil {
		m.start = nil
		return start, false
	}
	return nil, true
}

// holds reports a finished response that waits for its calls before it completes.
func (m *mcpResp) holds() bool { return m.pending > 0 || m.start != nil }

// appendToolResult gives the engine a call's result, in order with the session's other jobs.
func (t *toolState) appendToolResult(text string) {
	eng, turn := t.io.engine()
	if eng == nil {
		return
	}
	if text == "" {
		text = "(no output)"
	}
	if !t.io.submit(job{run: func(ctx context.Context) jobResult {
		return jobResult{err: eng.AppendText(ctx, turn, "tool", text), errCode: "runtime_append_failed"}
	}}) {
		t.io.sendError("input_backpressure", "too many pending engine jobs; an MCP call's result did not reach the model", "", "")
	}
}

// followUpOptions are a follow-up's: the session's tools with a forced choice relaxed to auto
// (it would call again forever), none past maxMCPRounds.
func (t *toolState) followUpOptions(cfg Config, depth int) respOptions {
	o := respOptions{audio: cfg.WantAudio(), maxTokens: cfg.MaxOutputTokens, format: cfg.OutputFormat}
	choice := cfg.ToolChoice
	if forcedChoice(choice) {
		choice = ToolChoice{Mode: duplex.ToolChoiceAuto}
	}
	if depth >= maxMCPRounds {
		choice = ToolChoice{Mode: duplex.ToolChoiceNone}
	}
	o.tools, o.mcpRefs, _ = t.specFor(cfg.MCP, cfg.Tools, choice, true, true, "session")
	o.mcpDepth = depth
	return o
}

// followUp is a response the session starts by itself after MCP results: its depth (the
// follow-ups before it since the client's own response), and for an approved call, the call
// it runs before the model's reply (its ID and ResponseID are set when the response begins).
type followUp struct {
	depth int
	call  *item
	args  string
}

// answerApproval is conversation.item.create with an mcp_approval_response: the client's
// answer to an mcp_approval_request, while active is the session's active response (nil:
// none). Approved, the session runs the call in a response of its own whose model reply
// follows the call; denied, the denial joins the conversation as the call's result and a
// follow-up response reads it. Either way the session carries on by itself (the Agents SDK
// sends no response.create after it): the follow-up returned is the response the actor starts
// (nil: the client was told why not).
func (t *toolState) answerApproval(c *CreateItem, active *response, epoch int) *followUp {
	const param = "item.approval_request_id"
	conv := t.io.conv
	req := conv.find(c.ApprovalRequestID)
	if req == nil || req.Type != "mcp_approval_request" {
		t.io.sendError("invalid_value", fmt.Sprintf("no mcp_approval_request item has id %q", c.ApprovalRequestID), c.ID, param)
		return nil
	}
	if req.MCP.AnsweredBy != "" {
		t.io.sendError("invalid_value", fmt.Sprintf("the approval request %q was already answered (item %s)", req.ID, req.MCP.AnsweredBy), c.ID, param)
		return nil
	}
	if active != nil {
		t.io.sendError("conversation_already_has_active_response", fmt.Sprintf(
			"Conversation already has an active response in progress: %s. Send the approval once it is finished; the call runs in a response of its own.", active.id), c.ID, "")
		return nil
	}
	if !conv.hasPrevious(c.PreviousItemID) {
		t.io.sendError("invalid_value", fmt.Sprintf("previous_item_id %q does not exist", c.PreviousItemID), c.ID, "previous_item_id")
		return nil
	}
	id, ok := t.io.newItem(c)
	if !ok {
		return nil
	}
	if t.io.room() < 2 {
		t.io.sendError("input_backpressure", "too many pending engine jobs; the approval was not taken", c.ID, "item")
		return nil
	}
	it := &item{ID: id, Type: "mcp_approval_response", Status: "completed",
		MCP: &mcpItem{ApprovalRequestID: req.ID, Approve: c.Approve, Reason: c.Reason}}
	conv.insert(it, c.PreviousItemID)
	t.io.send(conv.added(it, epoch, false))
	t.io.send(conv.done(it, epoch, false))
	req.MCP.AnsweredBy = id
	if !c.Approve {
		denied := fmt.Sprintf("the user denied this call of %s", req.Name)
		if c.Reason != "" {
			denied += ": " + c.Reason
		}
		t.appendToolResult(denied)
		return &followUp{depth: 1}
	}
	return &followUp{depth: 1, args: req.Arguments, call: &item{Type: "mcp_call", Status: "in_progress",
		ServerLabel: req.ServerLabel, Name: req.Name, MCP: &mcpItem{ApprovalRequestID: req.ID}}}
}
