package realtime

import (
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/link"
	"github.com/omniserve/omniserve/internal/session"
)

// This file is the one adapter between the session and the connection core: the only place a
// session.Event (a wire-neutral effect) becomes the core's outbound link.Event, through the
// session's dialect (chosen at the upgrade: openai.Encode, or vllm-omni's), on the session's
// goroutine and in its order. Nothing else in the transports reads a session.Event.

// outbound is where a session's events go once they are the core's: a connection's stream, or
// a call's fan-out (callOut: the data channel, the RTP player, the sidebands).
type outbound interface {
	Send(ev link.Event) error
	DropStale(epoch int)
}

// sessionSink implements session.Sink over the connection core. It outlives connections (a
// resume attaches a new one to its stream), so it holds what the session keeps across them: the
// dialect and the budget of invalid events (floodGuard).
type sessionSink struct {
	out   outbound
	d     dialect     // nil: OpenAI's
	guard *floodGuard // nil: unbounded
	// afterFirst is sent right after the session's first event (session.created): the error
	// answering a client's first frame, read before the session ran (autostart=0). Set before
	// Run starts, then read and cleared on the session's goroutine only.
	afterFirst *link.Event
}

// Send implements session.Sink. An error the client's own event provoked spends the session's
// budget of invalid events, counted under the code the dialect sends; over the budget, the
// error is not sent (the guard is ending the session).
func (s *sessionSink) Send(ev session.Event) error {
	if m, ok := s.dialect().(multiEncoder); ok {
		return s.sendAll(ev, m)
	}
	out, ok := s.outEvent(ev)
	if !ok {
		return nil // the dialect has no event for this effect
	}
	if e, isErr := out.Payload.(protocol.ErrorEvent); isErr && e.Error.Type == "invalid_request_error" && !s.guard.admit(e.Error.Code) {
		return nil
	}
	if err := s.sendAround(ev, out); err != nil || s.afterFirst == nil {
		return err
	}
	next := *s.afterFirst
	s.afterFirst = nil
	return s.out.Send(next)
}

// sendAround sends out, the event of ev, with the events its dialect sends around it (companion).
func (s *sessionSink) sendAround(ev session.Event, out link.Event) error {
	c, ok := s.dialect().(companion)
	if !ok {
		return s.out.Send(out)
	}
	before, after := c.Around(ev.Effect, ev.Beta)
	for _, p := range before {
		if err := s.out.Send(link.Event{Type: p.EventType(), Payload: p, Epoch: ev.Epoch, Model: ev.Model, Beta: ev.Beta}); err != nil {
			return err
		}
	}
	if err := s.out.Send(out); err != nil {
		return err
	}
	for _, p := range after {
		if err := s.out.Send(link.Event{Type: p.EventType(), Payload: p, Epoch: ev.Epoch, Model: ev.Model, Beta: ev.Beta}); err != nil {
			return err
		}
	}
	return nil
}

// DropStale implements session.Sink.
func (s *sessionSink) DropStale(epoch int) { s.out.DropStale(epoch) }

// dialect is the session's dialect.
func (s *sessionSink) dialect() dialect {
	if s.d == nil {
		return openAIDialect{}
	}
	return s.d
}

// outEvent is ev as the core queues it: the dialect's server event for its effect, with what the
// epoch fence needs. ok is false for an effect the dialect does not send.
func (s *sessionSink) outEvent(ev session.Event) (link.Event, bool) {
	p, ok := s.dialect().Encode(ev.Effect)
	if !ok {
		return link.Event{}, false
	}
	return link.Event{Type: p.EventType(), Payload: p, Epoch: ev.Epoch, Model: ev.Model, Beta: ev.Beta}, true
}

// sinkOf is the sink of a session of this package (nil for any other).
func sinkOf(sess *session.Session) *sessionSink {
	s, _ := sess.Sink().(*sessionSink)
	return s
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

// multiEncoder is a dialect whose effects may each be several server events, or none (Live:
// a delegation and its task), with an error event of its own shape (errorSpeller).
type multiEncoder interface {
	EncodeAll(e session.Effect) []protocol.ServerEvent
	errorSpeller
}

// errorCode is the code of an error event the client's own event provoked ("" for any other
// event, or a server error): it spends the budget of invalid events.
type errorCode interface {
	InvalidRequestCode() string
}

// sendAll sends the events of ev's effect in dialect m, in order, each invalid-request error
// within the session's budget of invalid events.
func (s *sessionSink) sendAll(ev session.Event, m multiEncoder) error {
	for _, p := range m.EncodeAll(ev.Effect) {
		if e, ok := p.(errorCode); ok && e.InvalidRequestCode() != "" && !s.guard.admit(e.InvalidRequestCode()) {
			continue
		}
		if err := s.out.Send(link.Event{Type: p.EventType(), Payload: p, Epoch: ev.Epoch, Model: ev.Model, Beta: ev.Beta}); err != nil {
			return err
		}
	}
	return nil
}
