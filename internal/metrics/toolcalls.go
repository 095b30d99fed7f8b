package metrics

import (
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Tool call kinds (ToolCallStats.Kind): an MCP tool the server called itself, or a function
// tool the client ran.
const (
	ToolKindMCP      = "mcp"
	ToolKindFunction = "function"
)

// ToolCallStats is one tool call timed for a turn (docs/STATS.md, ToolCallStats). An MCP call
// belongs to the turn during which the server ran it; a function call to the follow-up turn,
// the first response that starts after the client's function_call_output answered it.
type ToolCallStats struct {
	Kind        string // ToolKindMCP or ToolKindFunction
	ServerLabel string // the MCP server's label; "" for a function
	Name        string // the tool's name (on its MCP server)
	CallID      string // the mcp_call item id, or the function_call's call_id
	// Start is when the call started, in wall seconds: the MCP request was sent, or the
	// function call's arguments were done (response.function_call_arguments.done).
	Start float64
	// DurationMs runs from Start to the answer: the MCP server's result or failure, or the
	// client's function_call_output item. < 0: an MCP call that never reached its server
	// (not connected, too many in flight); it counts as a call and a failure, with no time.
	DurationMs float64
	// Error is "" for a call that completed, else why it failed: the mcp_call item's error
	// type (mcpFailureKinds) or cancelled.
	Error string
	// StartMs is Start relative to the turn's t0 (set by Finalize; < 0 when the call started
	// before the turn, as a function call does).
	StartMs float64
}

// AddToolCalls adds tool calls timed for the turn (ignored once finalized); the session hands
// them over when it ends the response, before Finalize.
func (t *TurnMetrics) AddToolCalls(calls ...ToolCallStats) {
	t.whileOpen(func() { t.toolCalls = append(t.toolCalls, calls...) })
}

// toolCallsLocked returns the turn's calls with StartMs relative to arrival (under t.mu).
func (t *TurnMetrics) toolCallsLocked() []ToolCallStats {
	if len(t.toolCalls) == 0 {
		return nil
	}
	out := slices.Clone(t.toolCalls)
	for i := range out {
		out[i].StartMs = (out[i].Start - t.arrival) * 1000
	}
	return out
}

// toolKindRow is one kind's column of the ToolCallStats table.
type toolKindRow struct {
	kind           string
	calls, failed  int
	totalMs, maxMs float64
}

// toolKinds sums the calls per kind, in kind order (function, mcp).
func toolKinds(calls []ToolCallStats) []toolKindRow {
	var out []toolKindRow
	for _, kind := range []string{ToolKindFunction, ToolKindMCP} {
		r := toolKindRow{kind: kind}
		for _, c := range calls {
			if c.Kind != kind {
				continue
			}
			r.calls++
			if c.Error != "" {
				r.failed++
			}
			if c.DurationMs >= 0 {
				r.totalMs += c.DurationMs
				r.maxMs = max(r.maxMs, c.DurationMs)
			}
		}
		if r.calls > 0 {
			out = append(out, r)
		}
	}
	return out
}

// renderToolCallTable renders one column per kind of call the turn had (function, mcp) and
// the rows calls, failed_calls, max_time_ms and total_time_ms (wall time; calls run in parallel
// may overlap); rows zero in every column are dropped, as in every table. No calls: no table,
// so a turn without calls prints what it always did.
func renderToolCallTable(title string, calls []ToolCallStats) (string, bool) {
	kinds := toolKinds(calls)
	if len(kinds) == 0 {
		return "", false
	}
	defs := []fieldDef[toolKindRow]{
		{"calls", func(r toolKindRow) cell { return intCell(int64(r.calls)) }},
		{"failed_calls", func(r toolKindRow) cell { return intCell(int64(r.failed)) }},
		{"max_time_ms", func(r toolKindRow) cell { return floatCell(r.maxMs) }},
		{"total_time_ms", func(r toolKindRow) cell { return floatCell(r.totalMs) }},
	}
	headers := []string{"Field"}
	for _, k := range kinds {
		headers = append(headers, k.kind)
	}
	rows := fieldRows(defs, kinds)
	return renderTable(title, headers, rows), true
}

// toolKindColumns is the structured record's array: one object per kind with the table's rows
// (all of them: a structured reader wants failed_calls 0 as a number, not an absent key).
type toolKindColumns []toolKindRow

func (cols toolKindColumns) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, k := range cols {
		err := enc.AppendObject(zapcore.ObjectMarshalerFunc(func(o zapcore.ObjectEncoder) error {
			o.AddString("kind", k.kind)
			o.AddInt("calls", k.calls)
			o.AddInt("failed_calls", k.failed)
			o.AddFloat64("max_time_ms", k.maxMs)
			o.AddFloat64("total_time_ms", k.totalMs)
			return nil
		}))
		if err != nil {
			return err
		}
	}
	return nil
}

// logToolCallRecord logs the structured ToolCallStats record of a request with calls.
func logToolCallRecord(log *zap.Logger, ids []zap.Field, calls []ToolCallStats) {
	if kinds := toolKinds(calls); len(kinds) > 0 {
		log.Info("ToolCallStats", append(ids, zap.Array("kinds", toolKindColumns(kinds)))...)
	}
}
