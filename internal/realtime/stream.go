package realtime

import (
	"errors"
	"fmt"
	"sync"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// errDetached is returned to a connection's writer whose connection no longer carries the
// session: it was lost, or a resume moved the session to another connection.
var errDetached = errors.New("the session moved to another connection")

// stream is one session's outbound event stream. It outlives connections: it numbers the events
// (server_event_seq, per session, so the numbering goes on across a resume), encodes each once,
// and keeps the recent frames in a bounded journal when resume is on. While a connection is
// attached, events go through that connection's queue and are numbered when its writer takes
// them (so an event dropped as stale never uses a number); while the session is detached they
// are numbered and journaled at once. It implements session.Sink.
type stream struct {
	beta bool

	mu       sync.Mutex
	seq      int64
	j        *journal  // nil: resume is off
	q        *outQueue // the attached connection's queue; nil while detached
	minEpoch int
}

func newStream(beta bool, j *journal) *stream { return &stream{beta: beta, j: j} }

// Send implements session.Sink: ev's effect is translated into the dialect's event here, on
// the session's goroutine, in the order the session produced it.
func (s *stream) Send(ev session.Event) error {
	out, ok := outbound(ev)
	if !ok {
		return nil // the dialect does not send this effect
	}
	return s.send(out)
}

// send queues ev on the attached connection, or journals it while detached.
func (s *stream) send(ev outEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.Model && ev.Epoch < s.minEpoch {
		return nil // stale: its epoch already ended
	}
	if s.q != nil {
		err := s.q.Send(ev)
		if s.j != nil && s.q.err() != nil {
			// A resumable session's queue failed (it overflowed, or its writer could not write):
			// it is detached now and everything it held goes to the journal, which is bounded in
			// bytes and events. Kept in the queue, the events of a session that goes on
			// producing while its writer waits out the write timeout would pile up without bound.
			s.detachLocked(s.q)
			return nil
		}
		return err
	}
	if s.j == nil {
		return ErrConnClosed
	}
	s.stampLocked(ev)
	return nil
}

// DropStale implements session.Sink.
func (s *stream) DropStale(epoch int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if epoch > s.minEpoch {
		s.minEpoch = epoch
	}
	if s.q != nil {
		s.q.DropStale(epoch)
	}
}

// next takes the oldest event queued on q and numbers, encodes and journals it, in one step
// under the stream's lock, so that an event is either still queued (and a detach journals it)
// or numbered: none is lost between the two. Stale events (their epoch ended while queued) and
// events the dialect does not send are skipped. data is nil when nothing is queued, done then
// true once q is closed; errDetached when q no longer carries the session.
func (s *stream) next(q *outQueue) (data []byte, done bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.q != q {
		return nil, true, errDetached
	}
	for {
		ev, ok, done := q.pop()
		if !ok {
			return nil, done, nil
		}
		if ev.Model && ev.Epoch < s.minEpoch {
			continue
		}
		data, err := s.stampLocked(ev)
		if err != nil || data != nil {
			return data, false, err
		}
	}
}

// stampLocked gives ev the next seq, encodes it with its event_id and journals the frame. It
// returns nil for an event the dialect does not send.
func (s *stream) stampLocked(ev outEvent) ([]byte, error) {
	typ, keep := s.wireName(ev)
	if !keep {
		return nil, nil
	}
	data, err := encodeEvent(ev, protocol.Envelope{Type: typ, EventID: newEventID(), Seq: s.seq + 1})
	if err != nil {
		return nil, err
	}
	s.seq++
	if s.j != nil {
		s.j.add(s.seq, data)
	}
	return data, nil
}

// wireName is ev's type in the stream's dialect; keep is false for an event the dialect does
// not send.
func (s *stream) wireName(ev outEvent) (typ string, keep bool) {
	typ = eventType(ev)
	if s.beta || ev.Beta {
		return protocol.BetaEventName(typ)
	}
	return typ, true
}

// eventType is ev's GA type: Type, or its payload's when it is not filled in.
func eventType(ev outEvent) string {
	if ev.Type == "" && ev.Payload != nil {
		return ev.Payload.EventType()
	}
	return ev.Type
}

// encodeEvent writes ev with env, in the session's field spelling (ev.Beta).
func encodeEvent(ev outEvent, env protocol.Envelope) ([]byte, error) {
	if ev.Payload == nil {
		return nil, fmt.Errorf("encoding %s: no payload", env.Type)
	}
	return protocol.Encode(ev.Payload, env, ev.Beta)
}

// attach makes q the session's connection (a new session's first one, or a resume, which
// replaces any connection still attached). It returns the journaled frames after seq after,
// which the connection writes before anything queued on q; complete is false when the journal
// no longer holds all of them.
func (s *stream) attach(q *outQueue, after int64) (replay [][]byte, complete bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.q; old != nil {
		s.detachLocked(old)
		old.fail(errDetached)
	}
	if s.j != nil {
		replay, complete = s.j.since(after)
	}
	q.DropStale(s.minEpoch)
	s.q = q
	return replay, complete
}

// detach ends q's hold on the session (its connection was lost): events q still holds are
// numbered and journaled in order, and later ones are journaled at once. A q that is not
// attached any more (replaced by a resume) changes nothing.
func (s *stream) detach(q *outQueue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.q == q {
		s.detachLocked(q)
	}
}

func (s *stream) detachLocked(q *outQueue) {
	s.q = nil
	for _, ev := range q.takeAll() {
		if ev.Model && ev.Epoch < s.minEpoch {
			continue
		}
		_, _ = s.stampLocked(ev) // an event that cannot be encoded is not sent either way
	}
}

// lastSeq is the newest event number given out.
func (s *stream) lastSeq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// journalStats reports what the journal holds (tests).
func (s *stream) journalStats() (events, bytes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.j == nil {
		return 0, 0
	}
	return s.j.len(), s.j.size()
}
