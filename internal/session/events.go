package session

import "github.com/omniserve/omniserve/internal/metrics"

// Event is one effect as the session hands it to its connection: what happened (Effect), with
// what the connection's epoch fence needs. The connection's dialect translator turns the effect
// into wire events; internal/realtime stamps and encodes them.
type Event struct {
	Effect Effect
	// Epoch is the session epoch the event belongs to.
	Epoch int
	// Model marks model output (deltas, item/part added) that the stale-epoch filter drops once
	// its epoch is over. Terminal events (done, cancelled) are never Model.
	Model bool
	// Beta: the client speaks its dialect's older variant (Options.Beta: known at the upgrade,
	// or detected from the client's first event), from this event on.
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

// ErrorEvent is the event of an Error effect; empty eventID and param are none.
func ErrorEvent(typ, code, message, eventID, param string) Event {
	return Event{Effect: Error{Type: typ, Code: code, Message: message, EventID: eventID, Param: param}}
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
