package realtime

import (
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/link"
	"github.com/omniserve/omniserve/internal/realtime/live"
)

// A sideband joining a GPT-Live WebRTC session gets the session's events of the last
// live.SidebandReplayMs of its timeline first, then the live ones, as OpenAI's sideband
// replays "the last ~3 s of events with their event_ids (clients dedupe)". What is replayed:
//
//   - every event the call's sidebands got whose timeline position (the timeline where it was
//     sent) is within the window ending at the timeline's position when the sideband joins,
//     in the order they were sent;
//   - under the event_id the other sidebands got it with: a Live call's sideband events are
//     given their event_id once, at the fan-out, so a sideband that reconnects (the SDK's
//     SidebandWS does) drops the replayed events it already has by their ids;
//   - not the reflected audio (session.input_audio.append, session.output_audio.delta): OpenAI
//     sends it without an event_id, so a client could not tell a replayed chunk from a new one,
//     and the microphone's carries no timing to place it by.
//
// The replay is bounded twice besides its window: at most maxReplayEvents events and
// maxReplayBytes of them (estimated as the connection queues estimate them), the oldest dropped
// first, so a burst within 3 s costs a session at most that, and a joining sideband's queue
// (realtime.send_queue_events, at least 16) is never filled by the replay alone.

const (
	maxReplayEvents = 128
	maxReplayBytes  = 256 << 10
)

// sidebandReplay is a Live call's recent sideband events (callSidebands.mu held for every use).
type sidebandReplay struct {
	events []replayed
	bytes  int
}

// replayed is one event with its timeline position and its estimated size.
type replayed struct {
	ev   link.Event
	atMs int64
	size int
}

// add keeps ev, sent at timeline position atMs, and drops what has left the window or the bounds.
func (r *sidebandReplay) add(ev link.Event, atMs int64) {
	size := 256 // an untyped event: its fields are few
	if ev.Payload != nil {
		size = protocol.WireSize(ev.Payload)
	}
	r.events = append(r.events, replayed{ev: ev, atMs: atMs, size: size})
	r.bytes += size
	r.prune(atMs)
}

// prune drops the events older than the window before nowMs, then the oldest while over a bound.
func (r *sidebandReplay) prune(nowMs int64) {
	i := 0
	for i < len(r.events) && (r.events[i].atMs < nowMs-live.SidebandReplayMs ||
		len(r.events)-i > maxReplayEvents || r.bytes > maxReplayBytes) {
		r.bytes -= r.events[i].size
		i++
	}
	if i > 0 {
		r.events = append(r.events[:0], r.events[i:]...)
	}
}

// since is the replay for a sideband joining at timeline position nowMs, oldest first.
func (r *sidebandReplay) since(nowMs int64) []link.Event {
	r.prune(nowMs)
	out := make([]link.Event, len(r.events))
	for i, e := range r.events {
		out[i] = e.ev
	}
	return out
}

// dropStale drops model output of epochs before epoch, as the sidebands' streams do (a barge-in
// ends the reply whose unsent frames they drop).
func (r *sidebandReplay) dropStale(epoch int) {
	kept := r.events[:0]
	for _, e := range r.events {
		if e.ev.Model && e.ev.Epoch < epoch {
			r.bytes -= e.size
			continue
		}
		kept = append(kept, e)
	}
	r.events = kept
}
