package metrics

import (
	"bytes"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// toolCallsExample is the duplex example with the calls of a turn that ran two MCP calls (one
// failed) after a client's function call answered before it.
func toolCallsExample(t *testing.T) *TurnMetrics {
	t.Helper()
	turn, _ := duplexExample(t)
	turn.AddToolCalls(
		ToolCallStats{Kind: ToolKindFunction, Name: "lookup_order", CallID: "call_1", Start: 1998.5, DurationMs: 1250.5},
		ToolCallStats{Kind: ToolKindMCP, ServerLabel: "calc", Name: "add", CallID: "item_a", Start: 2000.7, DurationMs: 41.25},
		ToolCallStats{Kind: ToolKindMCP, ServerLabel: "calc", Name: "hang", CallID: "item_b", Start: 2000.71, DurationMs: 300.5, Error: "http_error"},
		ToolCallStats{Kind: ToolKindMCP, ServerLabel: "gone", Name: "x", CallID: "item_c", Start: 2000.72, DurationMs: -1, Error: "protocol_error"},
	)
	return turn
}

// A turn with calls prints a ToolCallStats table after its other tables (one column per kind:
// count, failures, max and total wall time); the record carries each call placed on the turn's
// timeline. A turn without calls prints exactly what it did before (duplex_turn.golden).
func TestToolCallTable(t *testing.T) {
	t.Parallel()
	turn := toolCallsExample(t)
	log, logs := observedLogger()
	require.True(t, turn.Finalize(ReasonStop, log, true))
	got := transcript(turn.summarySnapshot().Entries)
	checkGolden(t, "duplex_turn_tools", got)
	require.Len(t, logs.All(), 6, "the five tables of a turn and the tool call table")
	require.Contains(t, got, "| Field         |  function |     mcp |")
	require.Contains(t, got, "| failed_calls  |         0 |       2 |")
	require.Contains(t, got, "| total_time_ms | 1,250.500 | 341.750 |", "the call that never ran adds no time")

	rec, ok := turn.Record()
	require.True(t, ok)
	require.Len(t, rec.ToolCalls, 4)
	require.InDelta(t, -1500.0, rec.ToolCalls[0].StartMs, 1e-6, "the function call began before the turn's t0")
	require.InDelta(t, 700.0, rec.ToolCalls[1].StartMs, 1e-6)
	require.Equal(t, rec.ToolCalls, turn.summarySnapshot().Request.ToolCalls, "one record for the tables and the rest")

	// Without calls: no table (the golden file of the duplex example is unchanged).
	plain, _ := duplexExample(t)
	require.True(t, plain.Finalize(ReasonStop, nil, true))
	require.NotContains(t, transcript(plain.summarySnapshot().Entries), "ToolCallStats")
	r2, _ := plain.Record()
	require.Nil(t, r2.ToolCalls)
}

// The structured record has the table's figures, failed_calls included when zero.
func TestToolCallRecord(t *testing.T) {
	t.Parallel()
	turn := toolCallsExample(t)
	turn.SetStructuredRecords(true)
	var buf bytes.Buffer
	require.True(t, turn.Finalize(ReasonStop, jsonLogger(&buf), true))
	recs := parseRecords(t, &buf)
	last := recs[len(recs)-1]
	require.Equal(t, "ToolCallStats", last["msg"])
	require.Equal(t, turn.ResponseID(), last["response_id"])
	kinds := last["kinds"].([]any)
	require.Len(t, kinds, 2)
	fn, mcp := kinds[0].(map[string]any), kinds[1].(map[string]any)
	require.Equal(t, "function", fn["kind"])
	require.InDelta(t, 0.0, fn["failed_calls"], 0)
	require.InDelta(t, 1250.5, fn["max_time_ms"], 1e-9)
	require.Equal(t, "mcp", mcp["kind"])
	require.InDelta(t, 3.0, mcp["calls"], 0)
	require.InDelta(t, 2.0, mcp["failed_calls"], 0)
	require.InDelta(t, 300.5, mcp["max_time_ms"], 1e-9)
	require.InDelta(t, 341.75, mcp["total_time_ms"], 1e-9)
}

// Prometheus observes the calls from the finalized record: MCP calls in the MCP families (a
// call that never reached its server counts as a failure with no duration), function calls in
// the function call histogram; a traced turn's trace id is their exemplar.
func TestToolCallsObservedFromTheRecord(t *testing.T) {
	t.Parallel()
	turn := toolCallsExample(t)
	require.True(t, turn.Finalize(ReasonStop, nil, false))
	rec, ok := turn.Record()
	require.True(t, ok)
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	rec.TraceID = traceID
	reg := prometheus.NewPedanticRegistry()
	c := NewCollectors(reg, "m")
	c.ObserveFinalized(rec)
	require.InDelta(t, 1.0, testutil.ToFloat64(c.mcpCallFailures.WithLabelValues("http_error")), 0)
	require.InDelta(t, 1.0, testutil.ToFloat64(c.mcpCallFailures.WithLabelValues("protocol_error")), 0)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]uint64{}
	sums := map[string]float64{}
	exemplars := map[float64]string{} // value → trace id
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				if ex := b.GetExemplar(); ex != nil && (mf.GetName() == "omniserve_realtime_mcp_call_duration_seconds" ||
					mf.GetName() == "omniserve_realtime_function_call_duration_seconds") {
					exemplars[ex.GetValue()] = ex.GetLabel()[0].GetValue()
				}
			}
		}
	}
	require.Equal(t, map[float64]string{0.04125: traceID, 0.3005: traceID, 1.2505: traceID}, exemplars)
	for _, mf := range mfs {
		switch mf.GetName() {
		case "omniserve_realtime_mcp_call_duration_seconds":
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" {
						got[l.GetValue()] = m.GetHistogram().GetSampleCount()
						sums[l.GetValue()] = m.GetHistogram().GetSampleSum()
					}
				}
			}
		case "omniserve_realtime_function_call_duration_seconds":
			got["function"] = mf.GetMetric()[0].GetHistogram().GetSampleCount()
			sums["function"] = mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	require.Equal(t, map[string]uint64{"completed": 1, "failed": 1, "function": 1}, got)
	require.InDelta(t, 0.04125, sums["completed"], 1e-12)
	require.InDelta(t, 0.3005, sums["failed"], 1e-12)
	require.InDelta(t, 1.2505, sums["function"], 1e-12)
}
