package session

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/mcpclient"
	"github.com/omniserve/omniserve/internal/metrics"
)

// mcpCall.outcome: the item's status, output or error, the result the engine reads, the
// failure kind of the turn's record and the call's figures.
func TestMCPCallOutcome(t *testing.T) {
	tests := []struct {
		name       string
		output     string
		err        error
		d          time.Duration
		startedAt  float64
		status     string
		result     string
		failure    string
		errCode    bool // the item's error carries a code
		durationMs float64
		start      float64
	}{
		{name: "completed", output: "42", d: 250 * time.Millisecond, startedAt: 10, status: "completed", result: "42", durationMs: 250, start: 10},
		{name: "tool error", err: &mcpclient.Error{Kind: mcpclient.KindTool, Message: "bad city"}, d: time.Second, startedAt: 10,
			status: "failed", result: "error (tool_execution_error): bad city", failure: mcpclient.KindTool, durationMs: 1000, start: 10},
		{name: "protocol error has a code", err: &mcpclient.Error{Kind: mcpclient.KindProtocol, Code: 404, Message: "no such method"}, d: time.Second, startedAt: 10,
			status: "failed", result: "error (protocol_error): no such method", failure: mcpclient.KindProtocol, errCode: true, durationMs: 1000, start: 10},
		{name: "plain error", err: errors.New("eof"), d: time.Second, startedAt: 10,
			status: "failed", result: "error (protocol_error): eof", failure: mcpclient.KindProtocol, durationMs: 1000, start: 10},
		{name: "cancelled", err: &mcpclient.Error{Kind: mcpclient.KindProtocol, Message: errMCPCallCancelled.Error(), Err: errMCPCallCancelled}, d: time.Second, startedAt: 10,
			status: "failed", result: "error (protocol_error): " + errMCPCallCancelled.Error(), failure: "cancelled", errCode: true, durationMs: 1000, start: 10},
		{name: "never started", err: errors.New("not connected"), d: -1, status: "failed", result: "error (protocol_error): not connected",
			failure: mcpclient.KindProtocol, durationMs: -1, start: 99},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &mcpCall{it: &item{ID: "item_1", ServerLabel: "srv", Name: "weather", MCP: &mcpItem{}}, startedAt: tc.startedAt}
			result, failure, _, _, st := c.outcome(tc.output, tc.err, tc.d, 99)
			require.Equal(t, tc.status, c.it.Status)
			require.Equal(t, tc.result, result)
			require.Equal(t, tc.failure, failure)
			require.Equal(t, metrics.ToolCallStats{Kind: metrics.ToolKindMCP, ServerLabel: "srv", Name: "weather", CallID: "item_1",
				Start: tc.start, DurationMs: tc.durationMs, Error: tc.failure}, st)
			if tc.err == nil {
				require.Equal(t, tc.output, *c.it.MCP.Output)
				require.Nil(t, c.it.MCP.Error)
				return
			}
			require.Nil(t, c.it.MCP.Output)
			_, hasCode := c.it.MCP.Error["code"]
			require.Equal(t, tc.errCode, hasCode)
		})
	}
}

// mcpState.start refuses a call whose server is not connected or that passes the bound; takeCall
// and takeCallsOf remove running calls and stop them.
func TestMCPStateCalls(t *testing.T) {
	var ts toolState
	ts.open()
	defer ts.close()
	m := &ts.mcp
	m.servers["off"] = &mcpServer{tool: MCPTool{ServerLabel: "off"}, cancel: func() {}}
	tests := []struct {
		name  string
		label string
		fill  int // running calls before
		want  string
	}{
		{"unknown server", "nope", 0, `MCP server "nope" is not connected`},
		{"listing failed", "off", 0, `MCP server "off" is not connected`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &mcpCall{it: &item{ID: newItemID(), ServerLabel: tc.label}}
			err := m.start(c, 1)
			require.ErrorContains(t, err, tc.want)
			require.Empty(t, m.calls)
		})
	}
	r1, r2 := &response{}, &response{}
	stopped := 0
	for i, r := range []*response{r1, r1, r2} {
		id := string(rune('a' + i))
		m.calls[id] = &mcpCall{r: r, it: &item{ID: id}, cancel: func() { stopped++ }}
	}
	require.Nil(t, m.takeCall("zz"))
	require.Len(t, m.takeCallsOf(r1), 2)
	require.Equal(t, 2, stopped)
	require.NotNil(t, m.takeCall("c"))
	require.Equal(t, 3, stopped)
	require.Empty(t, m.calls)
}

// mcpServer.listed keeps the tools and offers only those the tool grammar can follow.
func TestMCPServerListed(t *testing.T) {
	srv := &mcpServer{}
	ok := mcpclient.Tool{Name: "weather", InputSchema: []byte(`{"type":"object","properties":{"city":{"type":"string"}}}`)}
	bad := mcpclient.Tool{Name: "weird", InputSchema: []byte(`{"type":"object","properties":{"x":{"$ref":"#/nowhere"}}}`)}
	unusable := srv.listed(nil, []mcpclient.Tool{ok, bad})
	require.Len(t, srv.tools, 2)
	require.Equal(t, []string{"weird"}, unusable)
	require.Len(t, srv.usable, 1)
	require.Equal(t, "weather", srv.usable[0].Name)
}

// followUpOptions relaxes a forced choice to auto and offers no tool past maxMCPRounds;
// mcpResp.holds keeps a response open while calls run or an approved call waits.
func TestFollowUpOptions(t *testing.T) {
	tests := []struct {
		name   string
		choice ToolChoice
		depth  int
		want   string
	}{
		{"auto stays", ToolChoice{Mode: duplex.ToolChoiceAuto}, 1, duplex.ToolChoiceAuto},
		{"required relaxes", ToolChoice{Mode: duplex.ToolChoiceRequired}, 1, duplex.ToolChoiceAuto},
		{"past the rounds", ToolChoice{Mode: duplex.ToolChoiceAuto}, maxMCPRounds, duplex.ToolChoiceNone},
	}
	fn := []duplex.Tool{{Name: "f", Parameters: []byte(`{"type":"object"}`)}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ts toolState
			o := ts.followUpOptions(Config{Tools: fn, ToolChoice: tc.choice, MaxOutputTokens: 7}, tc.depth)
			require.Equal(t, 7, o.maxTokens)
			require.Equal(t, tc.depth, o.mcpDepth)
			if tc.want == duplex.ToolChoiceNone {
				require.Nil(t, o.tools, "no tools are offered")
				return
			}
			require.NotNil(t, o.tools)
			require.Equal(t, tc.want, o.tools.Choice)
		})
	}
	require.False(t, (&mcpResp{}).holds())
	require.True(t, (&mcpResp{pending: 1}).holds())
	require.True(t, (&mcpResp{start: func() {}}).holds())
}
