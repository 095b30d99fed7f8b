package link

import "github.com/omniserve/omniserve/internal/protocol"

// Event is one outbound server event as the connection core queues it: what to write (a typed
// payload, or the fields of an event not typed yet) and what the core needs to decide when and
// whether to write it (the epoch fence, the dialect's names). The core stamps event_id and
// server_event_seq when its writer takes the event.
//
// It is the core's own type, not the session's: whatever produces events (today the session,
// through the one adapter internal/realtime/session_sink.go; the player of a call for its
// output_audio_buffer events; the transports for their error events) hands the core this.
type Event struct {
	// Type is the GA event type; empty: the payload's.
	Type string
	// Payload is the typed event; Fields is used only where it is nil.
	Payload protocol.ServerEvent
	Fields  map[string]any
	// Epoch is the session epoch the event belongs to; Model marks model output (deltas,
	// item/part added) that the epoch fence drops once its epoch is over.
	Epoch int
	Model bool
	// Beta: the event is written in the beta dialect's names and field spelling.
	Beta bool
	// EventID, when set, is the event_id to write instead of a fresh one: an event fanned out
	// to several streams under one id (a GPT-Live call's sidebands, whose replay a sideband
	// that joins again dedupes by it).
	EventID string
}
