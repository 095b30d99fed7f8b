package session

import (
	"context"

	"github.com/omniserve/omniserve/internal/duplex"
)

// toolEngine is implemented by engines that take turns with the session's tools: SetTools
// gives the stream session.tools / tool_choice for the responses it starts by itself (server
// VAD with create_response on ?duplex=1), which response.create's own tools never reach.
type toolEngine interface {
	SetTools(ctx context.Context, spec *duplex.ToolSpec) error
}

// SetTools implements toolEngine.
func (e pipelineEngine) SetTools(ctx context.Context, spec *duplex.ToolSpec) error {
	return e.DuplexRequest.SetTools(ctx, spec)
}

// sync gives the engine stream the session's tools (cfg) when they changed or the stream is
// new, in order with the session's other engine jobs. A new stream has none, so a session
// without tools costs nothing.
func (t *toolState) sync(cfg Config) {
	eng, _ := t.io.engine()
	if eng == nil {
		return
	}
	te, ok := eng.(toolEngine)
	if !ok {
		return // responses the session starts carry the tools themselves
	}
	spec := t.sessionTools(cfg)
	if !t.give(eng, spec) {
		return
	}
	if !t.io.submit(job{run: func(ctx context.Context) jobResult {
		return jobResult{err: te.SetTools(ctx, spec), errCode: "runtime_append_failed"}
	}}) {
		t.notGiven() // the next sync tries again
		t.io.sendError("input_backpressure", "too many pending engine jobs; the session's tools were not applied yet", "", "session.tools")
	}
}

// toolCallMetrics is implemented by metrics that count the model's tool calls
// (metrics.Collectors: omniserve_tool_calls_total).
type toolCallMetrics interface {
	CountToolCall(api string)
}

func (m *Manager) observeToolCall() {
	if tm, ok := m.cfg.Metrics.(toolCallMetrics); ok {
		tm.CountToolCall("realtime")
	}
}
