package session

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/mcpclient"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// callEngine is a fake engine that takes responses with tools: a forced choice of a function
// makes that call (fixed arguments) and ends the reply in tool_calls; any other reply is one
// text unit. It records the messages appended and the tool choice of every reply.
type callEngine struct {
	t       *testing.T
	mu      sync.Mutex
	out     func(duplex.Output)
	turn    int
	args    string
	appends []string
	choices []string
	// tools are the names of the tools every reply was offered (nil: none).
	tools [][]string
	// turnCalls are the tool calls the session handed to its turns (turnToolMarker).
	turnCalls []metrics.ToolCallStats
}

func (e *callEngine) AppendAudio(context.Context, int, []float32) error { return nil }
func (e *callEngine) Commit(context.Context, int, bool) (duplex.Transcription, error) {
	return duplex.Transcription{}, nil
}
func (e *callEngine) Signal(context.Context, string, requestclient.Fence) error { return nil }
func (e *callEngine) Close(context.Context, string) error                       { return nil }
func (e *callEngine) Abort()                                                    {}
func (e *callEngine) MarkTurnArrival(_ int, ts float64) float64                 { return ts }
func (e *callEngine) BeginTurn(turn int, _ string, _ int, _ float64) requestclient.Turn {
	return requestclient.NewTurn(turn)
}

func (e *callEngine) AppendText(_ context.Context, _ int, role, text string) error {
	assert.Contains(e.t, []string{"user", "tool"}, role)
	e.mu.Lock()
	e.appends = append(e.appends, role+":"+text)
	e.mu.Unlock()
	return nil
}

func (e *callEngine) Respond(_ context.Context, _ requestclient.Turn, spec duplex.ResponseSpec) (int, error) {
	e.mu.Lock()
	e.turn++
	n := e.turn
	choice := "-"
	if spec.Tools != nil {
		choice = spec.Tools.Choice
		if choice == duplex.ToolChoiceFunction {
			choice += ":" + spec.Tools.Function
		}
	}
	e.choices = append(e.choices, choice)
	var names []string
	if spec.Tools != nil {
		for _, t := range spec.Tools.Tools {
			names = append(names, t.Name)
		}
	}
	e.tools = append(e.tools, names)
	e.mu.Unlock()
	if spec.Tools != nil && spec.Tools.Choice == duplex.ToolChoiceFunction {
		e.out(duplex.Output{Kind: duplex.OutToolCall, Turn: n, ToolCall: &duplex.ToolCall{
			ID: "call_1", Name: spec.Tools.Function, Arguments: e.args}})
		e.out(duplex.Output{Kind: duplex.OutFinished, Turn: n, FinishReason: duplex.FinishToolCalls})
		return n, nil
	}
	e.out(duplex.Output{Kind: duplex.OutText, Turn: n, Text: "ok", Tokens: 1})
	e.out(duplex.Output{Kind: duplex.OutFinished, Turn: n, FinishReason: "stop"})
	return n, nil
}

func (e *callEngine) seen() ([]string, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.appends...), append([]string(nil), e.choices...)
}

type callBackend struct{ eng *callEngine }

func (b *callBackend) SupportsDuplex() bool { return true }
func (b *callBackend) Open(_ context.Context, _ requestclient.Fence, _ duplex.Options, out func(duplex.Output)) (Engine, error) {
	b.eng.out = out
	return b.eng, nil
}

// EndTurn records the calls timed for each turn, in order.
func (e *callEngine) EndTurn(_ requestclient.Turn, o requestclient.TurnOutcome) (bool, func(context.Context) error) {
	e.mu.Lock()
	e.turnCalls = append(e.turnCalls, o.ToolCalls...)
	e.mu.Unlock()
	return true, nil
}

// failures are the Error of every MCP call handed to a turn ("" = completed).
func (e *callEngine) failures() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, c := range e.turnCalls {
		if c.Kind == metrics.ToolKindMCP {
			out = append(out, c.Error)
		}
	}
	return out
}

// callMCPServer is a real MCP server on loopback (the official SDK): add answers, block waits
// for its caller to give up.
func callMCPServer(t *testing.T) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	release := make(chan struct{})
	mcp.AddTool(srv, &mcp.Tool{Name: "add", Description: "adds"},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct {
			A int `json:"a"`
			B int `json:"b"`
		}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strconv.Itoa(in.A + in.B)}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "block", Description: "blocks"},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			select {
			case <-ctx.Done():
			case <-release: // a stateless server's Close waits for its handlers
			}
			return nil, nil, context.Canceled
		})
	// Stateless: no server session outlives its request (the leak check).
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true})
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	t.Cleanup(func() { close(release) }) // before hs.Close
	return hs.URL + "/mcp"
}

// callSession runs a text session whose MCP tool "srv" (require_approval approval) is listed.
func callSession(t *testing.T, eng *callEngine, approval string) (*Session, *sink, func() string) {
	t.Helper()
	return callSessionWith(t, eng, approval, nil, nil)
}

// callSessionWith is callSession with the session's function tools fn and tool_choice choice.
func callSessionWith(t *testing.T, eng *callEngine, approval string, fn []duplex.Tool, choice *ToolChoice) (*Session, *sink, func() string) {
	t.Helper()
	url := callMCPServer(t)
	allow, err := mcpclient.ParseAllowList([]string{url})
	require.NoError(t, err)
	m := NewManager(ManagerConfig{MaxSessions: 1, MCPAllowList: allow, Metrics: &panicCounter{}}, &callBackend{eng}, zap.NewNop())
	sk := &sink{ch: make(chan Event, 1024)}
	patch := manual16k
	patch.Modalities = []string{"text"}
	s, wait := runSession(t, m, Options{Duplex: true}, sk, patch)
	require.NoError(t, s.Submit(context.Background(), &UpdateSession{Patch: ConfigPatch{ToolsSet: true, Tools: fn, ToolChoice: choice,
		MCPTools: []MCPTool{{ServerLabel: "srv", ServerURL: url, RequireApproval: json.RawMessage(strconv.Quote(approval))}}}}))
	sk.until(t, "mcp_list_tools.completed")
	require.NoError(t, s.Submit(context.Background(), &CreateItem{ItemID: "u1", Role: "user", Text: "hi"}))
	sk.until(t, "conversation.item.done")
	return s, sk, wait
}

func forceMCP(name string) *CreateResponse {
	return &CreateResponse{ToolChoice: &ToolChoice{Mode: "mcp", ServerLabel: "srv", Function: name}}
}

// A forced MCP call runs on the server; its output completes the item, joins the engine's
// conversation as the call's result, and a follow-up response (tool_choice relaxed to auto)
// reads it.
func TestMCPCallAndFollowUp(t *testing.T) {
	eng := &callEngine{t: t, args: `{"a":2,"b":3}`}
	s, sk, wait := callSession(t, eng, "never")
	require.NoError(t, s.Submit(context.Background(), forceMCP("add")))
	added := sk.until(t, "response.output_item.added")
	require.Equal(t, "message", added.wire()["item"].(map[string]any)["type"])
	added = sk.until(t, "response.output_item.added")
	require.Equal(t, "mcp_call", added.wire()["item"].(map[string]any)["type"])
	require.EqualValues(t, 1, added.wire()["output_index"])
	require.Equal(t, `{"a":2,"b":3}`, sk.until(t, "response.mcp_call_arguments.done").wire()["arguments"])
	sk.until(t, "response.mcp_call.in_progress")
	sk.until(t, "response.mcp_call.completed")
	done := sk.until(t, "response.output_item.done")
	it := done.wire()["item"].(map[string]any)
	require.Equal(t, "5", it["output"])
	require.Equal(t, "completed", it["status"])
	first := sk.until(t, "response.done")
	sk.until(t, "response.created")
	second := sk.until(t, "response.done")
	require.NotEqual(t, first.wire()["response_id"], second.wire()["response_id"])
	appends, choices := eng.seen()
	require.Equal(t, []string{"user:hi", "tool:5"}, appends)
	require.Equal(t, []string{"function:add", "auto"}, choices, "the follow-up does not force the call again")
	require.Equal(t, []string{""}, eng.failures())
	s.Stop(ReasonClientClose)
	require.Equal(t, ReasonClientClose, wait())
}

// A call cancelled with its response fails its item (no error event: the client cancelled),
// never reaches the engine's conversation, starts no follow-up, and its goroutine ends
// (TestMain's leak check).
func TestMCPCallCancelled(t *testing.T) {
	eng := &callEngine{t: t, args: `{}`}
	s, sk, wait := callSession(t, eng, "never")
	require.NoError(t, s.Submit(context.Background(), forceMCP("block")))
	sk.until(t, "response.mcp_call.in_progress")
	require.NoError(t, s.Submit(context.Background(), &CancelResponse{}))
	sk.until(t, "response.mcp_call.failed")
	it := sk.until(t, "response.output_item.done").wire()["item"].(map[string]any)
	require.Equal(t, "failed", it["status"])
	require.Equal(t, "protocol_error", it["error"].(map[string]any)["type"])
	done := sk.until(t, "response.done")
	require.Equal(t, "cancelled", done.wire()["response"].(map[string]any)["status"])
	s.Stop(ReasonClientClose)
	require.Equal(t, ReasonClientClose, wait())
	sk.mu.Lock()
	created := 0
	for _, ev := range sk.events {
		require.NotEqual(t, "error", ev.typ(), "%v", ev.wire())
		if ev.typ() == "response.created" {
			created++
		}
	}
	sk.mu.Unlock()
	require.Equal(t, 1, created, "no follow-up")
	appends, _ := eng.seen()
	require.Equal(t, []string{"user:hi"}, appends)
	require.Equal(t, []string{"cancelled"}, eng.failures())
}

// require_approval: the call becomes an mcp_approval_request; a bad answer is refused with its
// param; a denial joins the conversation as the call's result and a follow-up reads it; the
// call never runs.
func TestMCPApprovalDenied(t *testing.T) {
	eng := &callEngine{t: t, args: `{"a":1,"b":1}`}
	s, sk, wait := callSession(t, eng, "always")
	require.NoError(t, s.Submit(context.Background(), forceMCP("add")))
	req := sk.until(t, "response.output_item.done").wire()["item"].(map[string]any)
	require.Equal(t, "mcp_approval_request", req["type"])
	require.Equal(t, `{"a":1,"b":1}`, req["arguments"])
	sk.until(t, "response.done")
	for _, tc := range []struct {
		name string
		c    *CreateItem
	}{
		{"unknown request", &CreateItem{ItemType: "mcp_approval_response", ApprovalRequestID: "item_nope"}},
		{"not a request", &CreateItem{ItemType: "mcp_approval_response", ApprovalRequestID: "u1"}},
	} {
		require.NoError(t, s.Submit(context.Background(), tc.c))
		e := sk.until(t, "error").wire()["error"].(map[string]any)
		require.Equal(t, "item.approval_request_id", e["param"], tc.name)
	}
	id := req["id"].(string)
	require.NoError(t, s.Submit(context.Background(), &CreateItem{ItemType: "mcp_approval_response", ApprovalRequestID: id, Reason: "no"}))
	resp := sk.until(t, "conversation.item.added").wire()["item"].(map[string]any)
	require.Equal(t, map[string]any{"id": resp["id"], "object": "realtime.item", "type": "mcp_approval_response",
		"approval_request_id": id, "approve": false, "reason": "no"}, resp)
	sk.until(t, "response.created")
	sk.until(t, "response.done")
	require.NoError(t, s.Submit(context.Background(), &CreateItem{ItemType: "mcp_approval_response", ApprovalRequestID: id, Approve: true}))
	e := sk.until(t, "error").wire()["error"].(map[string]any)
	require.Equal(t, "item.approval_request_id", e["param"], "answered already")
	s.Stop(ReasonClientClose)
	require.Equal(t, ReasonClientClose, wait())
	appends, _ := eng.seen()
	require.Equal(t, []string{"user:hi", "tool:the user denied this call of add: no"}, appends)
	require.Empty(t, eng.failures(), "no call ran")
}

func TestNeedsApproval(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		tool      string
		readOnly  bool
		want      bool
	}{
		{"absent: always", "", "add", false, true},
		{"always", `"always"`, "add", false, true},
		{"never", `"never"`, "add", false, false},
		{"never names it", `{"never":{"tool_names":["add"]}}`, "add", false, false},
		{"never names another", `{"never":{"tool_names":["echo"]}}`, "add", false, true},
		{"never read-only", `{"never":{"read_only":true}}`, "echo", true, false},
		{"always over never", `{"always":["add"],"never":["add"]}`, "add", false, true},
		{"neither", `{}`, "add", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, needsApproval(json.RawMessage(tc.raw), tc.tool, tc.readOnly))
		})
	}
}

// specFor: listed MCP tools join the function tools (a clashing name becomes label__name),
// tool_choice {type: mcp} forces a named tool or any of one server's, and a tool that is not
// listed is refused with its param.
func TestToolsForMCP(t *testing.T) {
	servers := []MCPTool{{ServerLabel: "a"}, {ServerLabel: "b"}, {ServerLabel: "down"}}
	conn := &mcpclient.Conn{}
	var ts toolState
	ts.mcp.servers = map[string]*mcpServer{
		"a":    {conn: conn, usable: []mcpclient.Tool{{Name: "add"}, {Name: "f"}}},
		"b":    {conn: conn, usable: []mcpclient.Tool{{Name: "add"}}},
		"down": {usable: []mcpclient.Tool{{Name: "x"}}}, // not connected: its listing failed
	}
	fn := []duplex.Tool{{Name: "f"}}
	names := func(spec *duplex.ToolSpec) []string {
		var out []string
		for _, t := range spec.Tools {
			out = append(out, t.Name)
		}
		return out
	}
	spec, refs, fe := ts.specFor(servers, fn, ToolChoice{}, true, true, "response")
	require.Nil(t, fe)
	require.Equal(t, []string{"f", "add", "a__f", "b__add"}, names(spec))
	require.Equal(t, map[string]mcpRef{"add": {"a", "add"}, "a__f": {"a", "f"}, "b__add": {"b", "add"}}, refs)

	spec, _, fe = ts.specFor(servers, fn, ToolChoice{Mode: "mcp", ServerLabel: "b", Function: "add"}, true, true, "response")
	require.Nil(t, fe)
	require.Equal(t, duplex.ToolChoiceFunction, spec.Choice)
	require.Equal(t, "b__add", spec.Function)

	spec, _, fe = ts.specFor(servers, fn, ToolChoice{Mode: "mcp", ServerLabel: "a"}, true, true, "response")
	require.Nil(t, fe)
	require.Equal(t, duplex.ToolChoiceRequired, spec.Choice)
	require.Equal(t, []string{"add", "a__f"}, names(spec), "only the server's tools")

	for _, tc := range []struct {
		name    string
		choice  ToolChoice
		withMCP bool
		param   string
	}{
		{"unlisted tool", ToolChoice{Mode: "mcp", ServerLabel: "a", Function: "delete_all"}, true, "response.tool_choice.name"},
		{"server down", ToolChoice{Mode: "mcp", ServerLabel: "down"}, true, "response.tool_choice.server_label"},
		{"own tools", ToolChoice{Mode: "mcp", ServerLabel: "a", Function: "add"}, false, "response.tool_choice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, fe := ts.specFor(servers, fn, tc.choice, true, tc.withMCP, "response")
			require.NotNil(t, fe)
			require.Equal(t, tc.param, fe.Param)
		})
	}
}
