package realtime

import (
	"github.com/omniserve/omniserve/internal/realtime/link"
	"github.com/omniserve/omniserve/internal/realtime/openai"
	"github.com/omniserve/omniserve/internal/session"
)

// This file is the one adapter between the session and the connection core: the only place a
// session.Event (a wire-neutral effect) becomes the core's outbound link.Event, through the
// dialect's translator (openai.Encode), on the session's goroutine and in its order. Nothing
// else in the transports reads a session.Event.

// outbound is where a session's events go once they are the core's: a connection's stream, or
// a call's fan-out (callOut: the data channel, the RTP player, the sidebands).
type outbound interface {
	Send(ev link.Event) error
	DropStale(epoch int)
}

// sessionSink implements session.Sink over the connection core.
type sessionSink struct{ out outbound }

// Send implements session.Sink.
func (s *sessionSink) Send(ev session.Event) error {
	out, ok := outEvent(ev)
	if !ok {
		return nil // the dialect has no event for this effect
	}
	return s.out.Send(out)
}

// DropStale implements session.Sink.
func (s *sessionSink) DropStale(epoch int) { s.out.DropStale(epoch) }

// outEvent is ev as the core queues it: the dialect's server event for its effect, with what the
// epoch fence needs. ok is false for an effect the dialect does not send.
func outEvent(ev session.Event) (link.Event, bool) {
	p, ok := openai.Encode(ev.Effect)
	if !ok {
		return link.Event{}, false
	}
	return link.Event{Type: p.EventType(), Payload: p, Epoch: ev.Epoch, Model: ev.Model, Beta: ev.Beta}, true
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
