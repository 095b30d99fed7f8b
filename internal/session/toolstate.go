package session

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/mcpclient"
)

// toolState is what the session's tools hold beyond their configuration (Config.Tools,
// ToolChoice, MCP): the MCP servers with the goroutines that list and call them (mcpState),
// the function calls the client answered, and what the engine was last given, so that sync
// sends only a change. It also turns the model's calls into their items and events (tools.go,
// mcp_call.go), reaching the rest of the session only through io. The actor owns it like the
// rest of the session's state: every method runs on the actor.
type toolState struct {
	io  toolIO
	mcp mcpState // MCP servers of session.tools (mcp.go, mcp_call.go)
	// answered are the function calls the client answered since the last response began: the
	// next response's turn counts them (tools.go), at most maxToolCallsAnswered.
	answered answeredCalls
	// engine and key are the engine the session's tools were last given to, and what it was
	// given (the spec's JSON; "" none, "\x00" not applied).
	engine Engine
	key    string
}

// toolIO is what toolState uses of the rest of the session: the actor's functions and its
// conversation, bound when the session is made. Each is called only on the actor.
type toolIO struct {
	send      func(Event)
	sendError func(typ, message, eventID, param string)
	// engine is the engine stream (nil before it opens) and the turn the user's input builds.
	engine func() (Engine, int)
	// submit queues an engine job in order with the session's others (false: the queue is
	// full); room is how many more jobs it takes now.
	submit func(job) bool
	room   func() int
	// newItem opens the engine for a client's new item and settles its id (false: the client
	// was told why not).
	newItem func(*CreateItem) (string, bool)
	// rule is the session's admission rule now, budget its prefill budget (admission.go).
	rule   func() admitRule
	budget func() *prefillBudget
	// afterCall carries a response on once one of its MCP calls ended (the actor's
	// mcpResp.afterCall: it may complete the response or start its model reply).
	afterCall func(r *response)
	countCall func()         // omniserve_tool_calls_total
	wallNow   func() float64 // the statistics clock
	conv      *conversation
	log       *zap.Logger
}

// open makes the MCP state ready: Run calls it before the actor reads mcp.results.
func (t *toolState) open() {
	t.mcp.ctx, t.mcp.cancel = context.WithCancel(context.Background())
	t.mcp.results = make(chan mcpResult, mcpResultQueue)
	t.mcp.servers = map[string]*mcpServer{}
	t.mcp.calls = map[string]*mcpCall{}
}

// close cancels every listing in flight, waits for their goroutines and closes the
// connections. It runs when Run returns, after the actor stopped reading results.
func (t *toolState) close() {
	t.mcp.cancel()
	t.mcp.wg.Wait()
	for {
		select {
		case r := <-t.mcp.results:
			if r.conn != nil {
				_ = r.conn.Close()
			}
			continue
		default:
		}
		break
	}
	for _, srv := range t.mcp.servers {
		srv.cancel()
		if srv.conn != nil {
			_ = srv.conn.Close()
		}
	}
	t.mcp.servers = nil
}

// closeConn closes a connection off the actor: closing ends an HTTP session with the server.
func (t *toolState) closeConn(c *mcpclient.Conn) {
	t.mcp.wg.Add(1)
	go func() {
		defer t.mcp.wg.Done()
		_ = c.Close()
	}()
}

// retire drops the MCP servers that want (the session's MCP tools) no longer holds as they
// were listed, cancelling their listing and closing their connection, and returns the tools
// that must be listed anew, in want's order.
func (t *toolState) retire(want []MCPTool) []MCPTool {
	byLabel := map[string]MCPTool{}
	for _, tool := range want {
		byLabel[tool.ServerLabel] = tool
	}
	for label, srv := range t.mcp.servers {
		if tool, ok := byLabel[label]; ok && sameMCPServer(tool, srv.tool) {
			continue
		}
		delete(t.mcp.servers, label)
		srv.cancel()
		if srv.conn != nil {
			t.closeConn(srv.conn)
		}
	}
	var fresh []MCPTool
	for _, tool := range want {
		if _, ok := t.mcp.servers[tool.ServerLabel]; !ok {
			fresh = append(fresh, tool)
		}
	}
	return fresh
}

// sameMCPServer: an update that repeats a tool unchanged does not list it again.
func sameMCPServer(a, b MCPTool) bool {
	a.Index, b.Index = 0, 0
	return reflect.DeepEqual(a, b)
}

// give reports whether eng must be given spec, and records it as given: a new engine has no
// tools, and an unchanged spec is not sent again. notGiven undoes the record when the job
// could not be queued.
func (t *toolState) give(eng Engine, spec *duplex.ToolSpec) bool {
	key := ""
	if spec != nil {
		b, _ := json.Marshal(spec)
		key = string(b)
	}
	if t.engine != eng {
		t.engine, t.key = eng, ""
	}
	if t.key == key {
		return false
	}
	t.key = key
	return true
}

// notGiven: the last spec give recorded did not reach the engine; the next give sends it.
func (t *toolState) notGiven() { t.key = "\x00" }

// mcpOffered are the listed tools of the MCP servers (servers: the session's, in order) that the model may be offered
// (only those of label when it is set), named so as not to clash with taken (the function
// tools' names): a tool keeps its own name unless taken, then it is label__name.
func (t *toolState) mcpOffered(servers []MCPTool, taken map[string]bool, label string) ([]duplex.Tool, map[string]mcpRef) {
	var out []duplex.Tool
	refs := map[string]mcpRef{}
	for _, tool := range servers {
		srv := t.mcp.servers[tool.ServerLabel]
		if srv == nil || srv.conn == nil || (label != "" && tool.ServerLabel != label) {
			continue
		}
		for _, mt := range srv.usable {
			name := mt.Name
			if taken[name] {
				name = tool.ServerLabel + "__" + mt.Name
			}
			if taken[name] {
				continue
			}
			taken[name] = true
			refs[name] = mcpRef{label: tool.ServerLabel, name: mt.Name}
			out = append(out, duplex.Tool{Name: name, Description: mt.Description, Parameters: mt.InputSchema})
		}
	}
	return out, refs
}

// specFor is the engine's tool spec of a reply with function tools fn and choice, with the
// MCP tools of servers when withMCP, and the MCP tools it offers by name. param names the
// choice in errors ("session" or "response").
func (t *toolState) specFor(servers []MCPTool, fn []duplex.Tool, choice ToolChoice, parallel, withMCP bool, param string) (*duplex.ToolSpec, map[string]mcpRef, *FieldError) {
	taken := map[string]bool{}
	for _, f := range fn {
		taken[f.Name] = true
	}
	refs := map[string]mcpRef{}
	if choice.Mode != "mcp" {
		tools := fn
		if withMCP {
			var mt []duplex.Tool
			mt, refs = t.mcpOffered(servers, taken, "")
			tools = append(append([]duplex.Tool(nil), fn...), mt...)
		}
		return toolSpec(tools, choice, parallel), refs, nil
	}
	if !withMCP {
		return nil, nil, &FieldError{"invalid_value", param + ".tool_choice", "tool_choice {type: \"mcp\"} forces a session MCP tool, but this response declares its own tools"}
	}
	unavailable := "(its listing has not finished, failed, or allowed_tools leaves it out)"
	if choice.Function == "" {
		mt, refs := t.mcpOffered(servers, taken, choice.ServerLabel)
		if len(mt) == 0 {
			return nil, nil, &FieldError{"invalid_value", param + ".tool_choice.server_label",
				fmt.Sprintf("MCP server %q has no listed tools to call %s", choice.ServerLabel, unavailable)}
		}
		return &duplex.ToolSpec{Tools: mt, Choice: duplex.ToolChoiceRequired, Parallel: parallel}, refs, nil
	}
	mt, refs := t.mcpOffered(servers, taken, "")
	for name, ref := range refs {
		if ref.label == choice.ServerLabel && ref.name == choice.Function {
			tools := append(append([]duplex.Tool(nil), fn...), mt...)
			return &duplex.ToolSpec{Tools: tools, Choice: duplex.ToolChoiceFunction, Function: name, Parallel: parallel}, refs, nil
		}
	}
	return nil, nil, &FieldError{"invalid_value", param + ".tool_choice.name",
		fmt.Sprintf("MCP server %q has no listed tool %q %s", choice.ServerLabel, choice.Function, unavailable)}
}
