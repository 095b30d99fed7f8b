package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/mcpclient"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// MCP tools (session.tools entries of `type: "mcp"`): the session itself connects to each
// server the operator's allow-list (ManagerConfig.MCPAllowList) permits, lists its tools
// through allowed_tools and reports the listing as an mcp_list_tools item with
// mcp_list_tools.in_progress / .completed / .failed. The network work runs on goroutines the
// session owns (mcpState); their results come back to the actor on a channel. Headers and
// authorization are the client's secrets: never logged, never echoed in session objects.

// mcpResultQueue bounds listings finished but not yet handled; a session lists at most a few
// servers, and a sender also gives up when the session ends.
const mcpResultQueue = 8

// maxMCPServers bounds the MCP tools of one session: each is a connection and up to
// MCPLimits.MaxResponseBytes of listed tools held by the session.
const maxMCPServers = 8

// mcpState is the session's MCP connections and the goroutines that open them.
type mcpState struct {
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	results chan mcpResult
	// servers are the listed (or listing) servers by label.
	servers map[string]*mcpServer
	gen     int
	// calls are the running MCP calls by mcp_call item id (mcp_call.go).
	calls map[string]*mcpCall
}

// mcpServer is one MCP tool's connection, once listed.
type mcpServer struct {
	// cancel stops the listing when the tool is dropped or replaced before it finished.
	cancel context.CancelFunc
	tool   MCPTool
	gen    int
	itemID string
	conn   *mcpclient.Conn // nil until listed (or when the listing failed)
	tools  []mcpclient.Tool
	// usable are the tools the model may be offered: those whose input schema the tool
	// grammar can follow.
	usable []mcpclient.Tool
}

type mcpResult struct {
	label  string
	gen    int
	itemID string
	conn   *mcpclient.Conn
	tools  []mcpclient.Tool
	err    error
	// call, when set, is a finished call instead of a listing (mcp_call.go).
	call *mcpCallResult
}

// checkMCPTools validates the MCP tools of a session.update before anything changes: unique
// labels, a server_url under the operator's allow-list, a well-formed allowed_tools and
// require_approval.
func checkMCPTools(tools []MCPTool, allow mcpclient.AllowList) *FieldError {
	if len(tools) > maxMCPServers {
		return &FieldError{"invalid_value", fmt.Sprintf("session.tools[%d]", tools[maxMCPServers].Index),
			fmt.Sprintf("at most %d MCP tools per session", maxMCPServers)}
	}
	labels := map[string]bool{}
	for _, t := range tools {
		p := fmt.Sprintf("session.tools[%d]", t.Index)
		if labels[t.ServerLabel] {
			return &FieldError{"invalid_value", p + ".server_label", fmt.Sprintf("duplicate server_label %q", t.ServerLabel)}
		}
		labels[t.ServerLabel] = true
		if !allow.Permits(t.ServerURL) {
			msg := fmt.Sprintf("server_url %q is not among the MCP servers this server may reach (realtime.mcp_allowed_urls)", t.ServerURL)
			if allow.Len() == 0 {
				msg = "this server reaches no MCP servers: its operator has not set realtime.mcp_allowed_urls"
			}
			return &FieldError{"mcp_server_not_allowed", p + ".server_url", msg}
		}
		if _, err := mcpclient.ParseFilter(t.AllowedTools); err != nil {
			return &FieldError{"invalid_value", p + ".allowed_tools", err.Error()}
		}
		if fe := checkRequireApproval(t.RequireApproval, p+".require_approval"); fe != nil {
			return fe
		}
	}
	return nil
}

// checkRequireApproval accepts "always", "never" or {always?: filter, never?: filter}.
func checkRequireApproval(raw json.RawMessage, param string) *FieldError {
	if len(raw) == 0 {
		return nil
	}
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		if mode == "always" || mode == "never" {
			return nil
		}
		return &FieldError{"invalid_value", param, fmt.Sprintf("require_approval %q must be always, never or {always, never}", mode)}
	}
	var obj struct {
		Always json.RawMessage `json:"always"`
		Never  json.RawMessage `json:"never"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return &FieldError{"invalid_type", param, "require_approval must be a string or an object"}
	}
	for _, f := range []json.RawMessage{obj.Always, obj.Never} {
		if _, err := mcpclient.ParseFilter(f); err != nil {
			return &FieldError{"invalid_value", param, err.Error()}
		}
	}
	return nil
}

// syncMCP starts listing every MCP tool of the session that is new or changed (an
// mcp_list_tools item each, mcpState.list), and closes the connections of those removed. It
// runs after session.updated, with the session's MCP tools (want), the operator's limits on
// MCP responses and the session's epoch.
func (t *toolState) syncMCP(want []MCPTool, lim mcpclient.Limits, epoch int) {
	for _, tool := range t.retire(want) {
		it := &item{ID: newItemID(), Type: "mcp_list_tools", ServerLabel: tool.ServerLabel}
		t.mcp.list(tool, it.ID, lim)
		t.io.conv.insert(it, "")
		t.io.send(t.io.conv.added(it, epoch, false))
		t.io.send(Event{Epoch: epoch, Effect: MCPListTools{Phase: PhaseInProgress, ItemID: it.ID}})
	}
}

// list connects to t's server and lists its tools on a goroutine of its own, reported on
// results for the listing item itemID; t replaces the server of its label.
func (m *mcpState) list(t MCPTool, itemID string, lim mcpclient.Limits) {
	m.gen++
	ctx, cancel := context.WithCancel(m.ctx)
	srv := &mcpServer{tool: t, gen: m.gen, itemID: itemID, cancel: cancel}
	m.servers[t.ServerLabel] = srv
	filter, _ := mcpclient.ParseFilter(t.AllowedTools) // checked by checkMCPTools
	cfg := mcpclient.Server{URL: t.ServerURL, Headers: t.Headers, Authorization: t.Authorization}
	results, gen, sessionCtx := m.results, srv.gen, m.ctx
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		r := mcpResult{label: t.ServerLabel, gen: gen, itemID: itemID}
		r.conn, r.err = mcpclient.Connect(ctx, cfg, lim)
		if r.err == nil {
			if r.tools, r.err = r.conn.ListTools(ctx, filter); r.err != nil {
				_ = r.conn.Close()
				r.conn = nil
			}
		}
		// A listing cut short because the tool was replaced still reports its item; only the
		// session's end stops the report.
		select {
		case results <- r:
		case <-sessionCtx.Done():
			if r.conn != nil {
				_ = r.conn.Close()
			}
		}
	}()
}

// listed keeps a finished listing's connection and tools and returns the names of those the
// model cannot be offered (their input schema is beyond the tool grammar).
func (srv *mcpServer) listed(conn *mcpclient.Conn, tools []mcpclient.Tool) (unusable []string) {
	srv.conn, srv.tools, srv.usable = conn, tools, nil
	for _, t := range tools {
		ft := duplex.Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema}
		if err := requestclient.CheckTools(duplex.ToolSpec{Tools: []duplex.Tool{ft}}, maxOutputTokensLimit); err != nil {
			unusable = append(unusable, t.Name)
			continue
		}
		srv.usable = append(srv.usable, t)
	}
	return unusable
}

// handleResult reports a finished listing: the item gets its tools and
// mcp_list_tools.completed, or mcp_list_tools.failed and an error event saying why. The
// session lives on either way. epoch and cfg are the session's now.
func (t *toolState) handleResult(r mcpResult, epoch int, cfg Config) {
	if r.call != nil {
		// A finished call completes its item and carries its response on; a call whose
		// response ended meanwhile was already reported failed (endMCPCalls).
		if c := t.mcp.takeCall(r.call.itemID); c != nil {
			t.finishMCPCall(c, r.call.output, r.call.err, r.call.dur)
			t.io.afterCall(c.r)
		}
		return
	}
	srv := t.mcp.servers[r.label]
	current := srv != nil && srv.gen == r.gen
	it := t.io.conv.find(r.itemID)
	if !current {
		// The tool was removed or replaced while it was being listed: its tools are not used.
		if r.conn != nil {
			t.closeConn(r.conn)
			r.conn = nil
		}
		r.err = errors.New("the tool was replaced or removed by a session.update before its listing finished")
	}
	if r.err != nil {
		t.io.log.Info("mcp list tools failed", zap.String("server_label", r.label), zap.Error(r.err))
		if it != nil {
			it.Status = "failed"
		}
		t.io.send(Event{Epoch: epoch, Effect: MCPListTools{Phase: PhaseFailed, ItemID: r.itemID}})
		param := ""
		if current {
			param = fmt.Sprintf("session.tools[%d].server_url", srv.tool.Index)
		}
		msg := r.err.Error()
		var me *mcpclient.Error
		if errors.As(r.err, &me) {
			msg = me.Message
		}
		t.io.sendError("mcp_list_tools_failed", fmt.Sprintf("listing the tools of MCP server %q failed: %s", r.label, msg), "", param)
		return
	}
	unusable := srv.listed(r.conn, r.tools)
	defer t.sync(cfg) // the engine's own turns offer the new tools too
	if it != nil {
		it.MCPTools, it.Status = r.tools, "completed"
		t.io.send(Event{Epoch: epoch, Effect: MCPListTools{Phase: PhaseCompleted, ItemID: it.ID}})
		t.io.send(t.io.conv.done(it, epoch, false))
	} // else the conversation dropped the item (history budget, delete); the tools stay
	if len(unusable) > 0 {
		t.io.sendError("mcp_tool_unsupported", fmt.Sprintf("MCP server %q lists tools whose input schema the tool grammar cannot follow; the model is not offered them: %s",
			r.label, strings.Join(unusable, ", ")), "", fmt.Sprintf("session.tools[%d]", srv.tool.Index))
	}
}
