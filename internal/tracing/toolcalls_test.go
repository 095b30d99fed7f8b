package tracing

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/omniserve/omniserve/internal/metrics"
)

// Each tool call of a turn is a child span of the turn, placed at its start and lasting its
// record figure: an MCP call (mcp.call <tool>) during the turn, a function call (tool.call
// <name>) before the follow-up turn's t0. Attributes name the call, never its arguments or
// output; a failure sets the error status and error.type; a call that ends after the turn's
// other figures stretches the turn span to its end.
func TestToolCallSpans(t *testing.T) {
	tr, exp := newTestTracer(t)
	rec := metrics.FinalizedRequest{Duplex: true, FinishedReason: metrics.ReasonStop}
	rec.E2E.RequestID = "resp-tools"
	rec.E2E.E2ETotalMs = 1000
	rec.Stages = []metrics.StageRequestStats{{StageID: 0, StageGenTimeMs: 400}}
	rec.ToolCalls = []metrics.ToolCallStats{
		{Kind: metrics.ToolKindFunction, Name: "lookup_order", CallID: "call_1", StartMs: -1500, DurationMs: 1250.5},
		{Kind: metrics.ToolKindMCP, ServerLabel: "calc", Name: "add", CallID: "item_a", StartMs: 700, DurationMs: 41.25},
		{Kind: metrics.ToolKindMCP, ServerLabel: "calc", Name: "hang", CallID: "item_b", StartMs: 710, DurationMs: 800, Error: "http_error"},
		{Kind: metrics.ToolKindMCP, ServerLabel: "gone", Name: "x", CallID: "item_c", StartMs: 720, DurationMs: -1, Error: "protocol_error"},
	}
	tr.ObserveFinalized(rec)
	spans := exp.GetSpans()
	var turn tracetest.SpanStub
	for _, s := range spans {
		if s.Name == TurnSpanName {
			turn = s
		}
	}
	require.Equal(t, TurnSpanName, turn.Name)
	fromT0 := func(ts time.Time) float64 { return float64(ts.Sub(turn.StartTime).Microseconds()) / 1000 }
	require.InDelta(t, 1510, fromT0(turn.EndTime), 0.001, "the turn span ends with its last call (710 + 800 ms)")
	type placed struct {
		start, end float64
		attrs      map[string]string
		status     codes.Code
		kind       trace.SpanKind
	}
	got := map[string]placed{}
	for _, s := range spans {
		switch s.Name {
		case TurnSpanName:
		case "stage 0":
			require.InDelta(t, 1000, fromT0(s.EndTime), 0.001, "stage spans end where they did without calls")
			require.InDelta(t, 400, float64(s.EndTime.Sub(s.StartTime).Microseconds())/1000, 0.001)
		default:
			require.Equal(t, turn.SpanContext.SpanID(), s.Parent.SpanID(), "%s is a child of the turn", s.Name)
			got[s.Name] = placed{fromT0(s.StartTime), fromT0(s.EndTime), attrs(s.Attributes), s.Status.Code, s.SpanKind}
		}
	}
	require.Len(t, got, 4)
	fn := got["tool.call lookup_order"]
	require.InDelta(t, -1500, fn.start, 0.001)
	require.InDelta(t, -249.5, fn.end, 0.001, "it lasts its 1250.5 ms")
	require.Equal(t, map[string]string{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup_order",
		"gen_ai.tool.call.id": "call_1", "omniserve.tool.kind": "function", "omniserve.tool.outcome": "completed",
		"omniserve.tool_call_ms": "1250.5"}, fn.attrs)
	require.Equal(t, codes.Unset, fn.status)
	require.Equal(t, trace.SpanKindClient, fn.kind)
	add := got["mcp.call add"]
	require.InDelta(t, 700, add.start, 0.001)
	require.InDelta(t, 741.25, add.end, 0.001)
	require.Equal(t, "calc", add.attrs["omniserve.mcp.server_label"])
	require.Equal(t, "item_a", add.attrs["gen_ai.tool.call.id"])
	hang := got["mcp.call hang"]
	require.Equal(t, "failed", hang.attrs["omniserve.tool.outcome"])
	require.Equal(t, "http_error", hang.attrs["error.type"])
	require.Equal(t, codes.Error, hang.status)
	gone := got["mcp.call x"]
	require.InDelta(t, 0, gone.end-gone.start, 0.001, "never reached its server: no time")
	require.Equal(t, "false", gone.attrs["omniserve.tool.reached_server"])
}
