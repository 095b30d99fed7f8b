package realtime

import (
	"github.com/omniserve/omniserve/internal/realtime/link"
	"github.com/omniserve/omniserve/internal/session"
)

// This file is the one adapter between the session and the connection core: the only place a
// session.Event becomes the core's outbound link.Event. Nothing else in the transports reads a
// session.Event. (When the session speaks typed effects, a dialect translator replaces
// outEvent, and sessionSink stays the seam: effects in, link.Events out.)

// outbound is where a session's events go once they are the core's: a connection's stream, or
// a call's fan-out (callOut: the data channel, the RTP player, the sidebands).
type outbound interface {
	Send(ev link.Event) error
	DropStale(epoch int)
}

// sessionSink implements session.Sink over the connection core.
type sessionSink struct{ out outbound }

// Send implements session.Sink.
func (s *sessionSink) Send(ev session.Event) error { return s.out.Send(outEvent(ev)) }

// DropStale implements session.Sink.
func (s *sessionSink) DropStale(epoch int) { s.out.DropStale(epoch) }

// outEvent is ev as the core queues it.
func outEvent(ev session.Event) link.Event {
	return link.Event{Type: ev.Type, Payload: ev.Payload, Fields: ev.Fields, Epoch: ev.Epoch, Model: ev.Model, Beta: ev.Beta}
}

// streamOf is the stream of a WebSocket session's sink (nil for any other sink, e.g. a call's):
// a resume attaches a new connection to it.
func streamOf(sink session.Sink) *link.Stream {
	s, ok := sink.(*sessionSink)
	if !ok {
		return nil
	}
	st, _ := s.out.(*link.Stream)
	return st
}
