package session

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
)

// textEngine records the tool results the session's jobs append; the rest of Engine is unused.
type textEngine struct {
	Engine
	texts []string
}

func (e *textEngine) AppendText(_ context.Context, _ int, role, text string) error {
	e.texts = append(e.texts, role+": "+text)
	return nil
}

// toolRig is a toolState wired to recording functions instead of a Session: what it sends,
// the errors it reports, the jobs it queues (run at once on eng) and the responses it hands
// back to the actor.
type toolRig struct {
	t      *toolState
	conv   conversation
	eng    *textEngine
	events []string
	errs   []string // "code param"
	room   int
	after  []*response
	counts int
}

func newToolRig(t *testing.T, room int) *toolRig {
	g := &toolRig{t: &toolState{}, eng: &textEngine{}, room: room}
	g.t.open()
	t.Cleanup(g.t.close)
	g.t.io = toolIO{
		send: func(ev Event) { g.events = append(g.events, ev.typ()) },
		sendError: func(typ, _, _, param string) {
			g.errs = append(g.errs, typ+" "+param)
		},
		engine: func() (Engine, int) { return g.eng, 3 },
		submit: func(j job) bool {
			if g.room == 0 {
				return false
			}
			g.room--
			require.NoError(t, j.run(context.Background()).err)
			return true
		},
		room:      func() int { return g.room },
		newItem:   func(c *CreateItem) (string, bool) { return firstNonEmpty(c.ItemID, "item_client"), true },
		rule:      func() admitRule { return admitRule{} },
		budget:    func() *prefillBudget { return &prefillBudget{} },
		afterCall: func(r *response) { g.after = append(g.after, r) },
		countCall: func() { g.counts++ },
		wallNow:   func() float64 { return 100 },
		conv:      &g.conv,
		log:       zap.NewNop(),
	}
	return g
}

// The model's calls become their items and events; an MCP call that cannot start fails at
// once, its error joins the engine's conversation and the actor carries its response on.
func TestToolStateEmitsCalls(t *testing.T) {
	refs := map[string]mcpRef{"lookup": {label: "srv", name: "lookup"}}
	for _, tc := range []struct {
		name       string
		call       string
		approval   bool // the server is listed, with require_approval absent ("always")
		wantMCP    bool
		wantEvents []string
		wantErrs   []string
		wantTexts  []string
		wantStatus string
		wantAfter  int
	}{
		{name: "function call", call: "get_weather", wantEvents: []string{
			"response.output_item.added", "conversation.item.added", "response.function_call_arguments.delta",
			"response.function_call_arguments.done", "conversation.item.done", "response.output_item.done"},
			wantStatus: "completed"},
		{name: "mcp call of a server not connected", call: "lookup", wantMCP: true, wantEvents: []string{
			"response.output_item.added", "conversation.item.added", "response.mcp_call_arguments.delta",
			"response.mcp_call_arguments.done", "response.mcp_call.in_progress", "response.mcp_call.failed",
			"conversation.item.done", "response.output_item.done"},
			wantErrs:   []string{"mcp_call_failed "},
			wantTexts:  []string{`tool: error (protocol_error): MCP server "srv" is not connected (its tool was removed or its listing failed)`},
			wantStatus: "failed", wantAfter: 1},
		{name: "mcp call that needs approval", call: "lookup", approval: true, wantMCP: true, wantEvents: []string{
			"response.output_item.added", "conversation.item.added", "conversation.item.done", "response.output_item.done"},
			wantStatus: "completed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newToolRig(t, 4)
			if tc.approval {
				g.t.mcp.servers["srv"] = &mcpServer{tool: MCPTool{ServerLabel: "srv"}, cancel: func() {}}
			}
			r := &response{id: "resp_1", mcp: mcpResp{refs: refs}}
			c := &duplex.ToolCall{ID: "call_1", Name: tc.call, Arguments: `{"q":"x"}`}
			mcp := g.t.emitMCPCall(r, c, Config{})
			require.Equal(t, tc.wantMCP, mcp)
			if !mcp {
				g.t.emitFunctionCall(r, c)
			}
			require.Equal(t, tc.wantEvents, g.events)
			require.Equal(t, tc.wantErrs, g.errs)
			require.Equal(t, tc.wantTexts, g.eng.texts)
			require.Len(t, g.after, tc.wantAfter)
			require.Equal(t, 1, g.counts)
			require.Len(t, r.calls, 1)
			require.Equal(t, tc.wantStatus, r.calls[0].Status)
			require.Same(t, r.calls[0], g.conv.find(r.calls[0].ID))
			require.Zero(t, r.mcp.pending)
			require.Equal(t, tc.wantAfter == 1, r.mcp.followUp, "a failed call's error is a result a follow-up reads")
		})
	}
}

// A function_call_output joins the conversation and the engine once per call; what is refused
// says why and adds nothing.
func TestToolStateFunctionOutput(t *testing.T) {
	for _, tc := range []struct {
		name     string
		callID   string
		twice    bool
		room     int
		want     bool
		wantErrs []string
		texts    int
	}{
		{name: "answers the call", callID: "call_1", room: 1, want: true, texts: 1},
		{name: "no such call", callID: "call_9", room: 1, wantErrs: []string{"invalid_value item.call_id"}},
		{name: "second output", callID: "call_1", room: 2, twice: true, want: false, wantErrs: []string{"invalid_value item.call_id"}, texts: 1},
		{name: "job queue full", callID: "call_1", room: 0, wantErrs: []string{"input_backpressure item"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newToolRig(t, tc.room)
			g.conv.insert(&item{ID: "item_call", Type: "function_call", CallID: "call_1", Name: "f", CalledAt: 90}, "")
			c := &CreateItem{ItemType: "function_call_output", CallID: tc.callID, Output: "42"}
			if tc.twice {
				require.True(t, g.t.createFunctionOutput(&CreateItem{ItemID: "item_first", CallID: tc.callID, Output: "41"}, 0))
			}
			require.Equal(t, tc.want, g.t.createFunctionOutput(c, 0))
			require.Equal(t, tc.wantErrs, g.errs)
			require.Len(t, g.eng.texts, tc.texts)
			require.Len(t, g.t.answered, tc.texts, "each answered call is timed once for the next response")
			if tc.want {
				require.Equal(t, []string{"tool: 42"}, g.eng.texts)
				require.InDelta(t, 10000, g.t.answered[0].DurationMs, 1e-6)
				require.NotNil(t, g.conv.callOutput("call_1"))
			}
		})
	}
}

// The client's answer to an approval request: a denial joins the engine's conversation and
// asks for a follow-up; an approval asks for a response that runs the call; anything else is
// refused with the param at fault.
func TestToolStateAnswerApproval(t *testing.T) {
	for _, tc := range []struct {
		name      string
		req       string
		approve   bool
		active    bool
		answered  bool
		want      *followUp
		wantErrs  []string
		wantTexts []string
	}{
		{name: "denied", req: "item_req", want: &followUp{depth: 1},
			wantTexts: []string{"tool: the user denied this call of lookup: no"}},
		{name: "approved", req: "item_req", approve: true, want: &followUp{depth: 1, args: `{"q":"x"}`,
			call: &item{Type: "mcp_call", Status: "in_progress", ServerLabel: "srv", Name: "lookup", MCP: &mcpItem{ApprovalRequestID: "item_req"}}}},
		{name: "no such request", req: "item_x", wantErrs: []string{"invalid_value item.approval_request_id"}},
		{name: "already answered", req: "item_req", answered: true, wantErrs: []string{"invalid_value item.approval_request_id"}},
		{name: "a response is active", req: "item_req", active: true, wantErrs: []string{"conversation_already_has_active_response "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newToolRig(t, 4)
			req := &item{ID: "item_req", Type: "mcp_approval_request", ServerLabel: "srv", Name: "lookup", Arguments: `{"q":"x"}`, MCP: &mcpItem{}}
			if tc.answered {
				req.MCP.AnsweredBy = "item_earlier"
			}
			g.conv.insert(req, "")
			var active *response
			if tc.active {
				active = &response{id: "resp_1"}
			}
			c := &CreateItem{ItemType: "mcp_approval_response", ApprovalRequestID: tc.req, Approve: tc.approve, Reason: "no"}
			if tc.approve {
				c.Reason = ""
			}
			require.Equal(t, tc.want, g.t.answerApproval(c, active, 0))
			require.Equal(t, tc.wantErrs, g.errs)
			require.Equal(t, tc.wantTexts, g.eng.texts)
			if tc.want != nil {
				require.Equal(t, "item_client", req.MCP.AnsweredBy)
				require.Equal(t, []string{"conversation.item.added", "conversation.item.done"}, g.events)
			} else {
				require.Empty(t, g.events)
			}
		})
	}
}
