package session

import (
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/protocol"
)

// Event is one server event as the session produces it. internal/realtime stamps event_id and
// server_event_seq at write time and encodes Payload (protocol.Encode), or Type plus Fields for
// an event not typed yet.
type Event struct {
	// Type is the GA event type; Session.send fills it from Payload.
	Type string
	// Payload is the typed event. Fields is used only where it is nil: the events that
	// tools.go and mcp.go still build as maps.
	Payload protocol.ServerEvent
	// Epoch is the session epoch the event belongs to.
	Epoch int
	// Model marks model output (deltas, item/part added) that the stale-epoch filter drops once
	// its epoch is over. Terminal events (done, cancelled) are never Model.
	Model  bool
	Fields map[string]any
	// Beta: the session speaks the beta dialect (known from the header, or detected from the
	// client's first event): the connection writes the beta event name.
	Beta bool
}

// Sink is the outbound side of the connection, declared by its consumer (this package).
type Sink interface {
	// Send queues ev without blocking; an error means the client is gone or too slow to drain its
	// queue, and the session ends.
	Send(ev Event) error
	// DropStale removes queued model output of epochs before epoch and refuses any later.
	DropStale(epoch int)
}

// ErrorEvent is an OpenAI-style error event; empty eventID and param are null.
func ErrorEvent(typ, code, message, eventID, param string) Event {
	return Event{Type: "error", Payload: protocol.NewErrorEvent(typ, code, message, eventID, param)}
}

// ErrorType maps an error code to its Realtime error class.
func ErrorType(code string) string {
	switch code {
	case "resource_exhausted", "duplex_session_busy", "input_backpressure":
		return "rate_limit_error"
	case "runtime_open_failed", "runtime_append_failed", "runtime_abort_failed", "engine_error", "server_error", "kv_cache_full":
		return "server_error"
	}
	return "invalid_request_error"
}

// finishedReasonForCancel maps a cancel source to the logged finished_reason (vllm-omni's
// table, with internal/metrics' corrections for server-VAD barge-in and engine errors).
func finishedReasonForCancel(source string) string { return metrics.FinishedReasonForCancel(source) }
