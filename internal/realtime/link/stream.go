package link

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/omniserve/omniserve/internal/protocol"
)

// errDetached is returned to a connection's writer whose connection no longer carries the
// session: it was lost, or a resume moved the session to another connection.
var errDetached = errors.New("the session moved to another connection")

// stream is one session's outbound event stream. It outlives connections: it numbers the events
// (server_event_seq, per session, so the numbering goes on across a resume), encodes each once,
// and keeps the recent frames in a bounded journal when resume is on. While a connection is
// attached, events go through that connection's queue and are numbered when its writer takes
// them (so an event dropped as stale never uses a number); while the session is detached they
// are numbered and journaled at once.
type Stream struct {
	beta bool

	mu       sync.Mutex
	seq      int64
	j        *Journal // nil: resume is off
	q        *Queue   // the attached connection's queue; nil while detached
	minEpoch int
}

// NewStream returns the stream of a session of the beta dialect (or not), journaled in j (nil:
// resume is off).
func NewStream(beta bool, j *Journal) *Stream { return &Stream{beta: beta, j: j} }

// Send queues ev on the attached connection, or journals it while detached; an error means the
// client is gone or too slow, and the session ends.
func (s *Stream) Send(ev Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.Model && ev.Epoch < s.minEpoch {
		return nil // stale: its epoch already ended
	}
	if s.q != nil {
		err := s.q.Send(ev)
		if s.j != nil && s.q.Err() != nil {
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

// DropStale removes queued model output of epochs before epoch and refuses any later.
func (s *Stream) DropStale(epoch int) {
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
func (s *Stream) next(q *Queue) (data []byte, done bool, err error) {
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
func (s *Stream) stampLocked(ev Event) ([]byte, error) {
	typ, keep := s.wireName(ev)
	if !keep {
		return nil, nil
	}
	id := ev.EventID
	if id == "" {
		id = NewEventID()
	}
	data, err := encodeEvent(ev, protocol.Envelope{Type: typ, EventID: id, Seq: s.seq + 1})
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
func (s *Stream) wireName(ev Event) (typ string, keep bool) {
	typ = eventType(ev)
	if s.beta || ev.Beta {
		return protocol.BetaEventName(typ)
	}
	return typ, true
}

// eventType is ev's GA type: Type, or its payload's when the session did not fill it.
func eventType(ev Event) string {
	if ev.Type == "" && ev.Payload != nil {
		return ev.Payload.EventType()
	}
	return ev.Type
}

// encodeEvent writes ev with env: a typed payload in the session's field spelling (ev.Beta),
// or the map of an event that is not typed yet, whose keys json sorts as the typed ones are.
func encodeEvent(ev Event, env protocol.Envelope) ([]byte, error) {
	if ev.Payload != nil {
		return protocol.Encode(ev.Payload, env, ev.Beta)
	}
	m := make(map[string]any, len(ev.Fields)+3)
	for k, v := range ev.Fields {
		m[k] = v
	}
	m["type"] = env.Type
	m["event_id"] = env.EventID
	if env.Seq != 0 {
		m["server_event_seq"] = env.Seq
	}
	data, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", env.Type, err)
	}
	return data, nil
}

// Attach makes q the session's connection (a new session's first one, or a resume, which
// replaces any connection still attached). It returns the journaled frames after seq after,
// which the connection writes before anything queued on q; complete is false when the journal
// no longer holds all of them.
func (s *Stream) Attach(q *Queue, after int64) (replay [][]byte, complete bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.q; old != nil {
		s.detachLocked(old)
		old.Fail(errDetached)
	}
	if s.j != nil {
		replay, complete = s.j.since(after)
	}
	q.DropStale(s.minEpoch)
	s.q = q
	return replay, complete
}

// Detach ends q's hold on the session (its connection was lost): events q still holds are
// numbered and journaled in order, and later ones are journaled at once. A q that is not
// attached any more (replaced by a resume) changes nothing.
func (s *Stream) Detach(q *Queue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.q == q {
		s.detachLocked(q)
	}
}

func (s *Stream) detachLocked(q *Queue) {
	s.q = nil
	for _, ev := range q.takeAll() {
		if ev.Model && ev.Epoch < s.minEpoch {
			continue
		}
		_, _ = s.stampLocked(ev) // an event that cannot be encoded is not sent either way
	}
}

// LastSeq is the newest event number given out.
func (s *Stream) LastSeq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// ErrBadAck refuses an acknowledgement of an event never sent: its seq is beyond the newest
// one given out.
var ErrBadAck = errors.New("server_event_seq acknowledges an event not sent yet")

// Ack records that the client received every event up to seq (session.event_ack): the journal
// drops them. A seq beyond the newest event is ErrBadAck and changes nothing; an ack is never
// answered either way (an answer would be numbered, and acked, and answered: a loop).
func (s *Stream) Ack(seq int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq < 0 || seq > s.seq {
		return ErrBadAck
	}
	if s.j != nil {
		s.j.trim(seq)
	}
	return nil
}

// JournalStats reports what the journal holds (tests).
func (s *Stream) JournalStats() (events, bytes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.j == nil {
		return 0, 0
	}
	return s.j.len(), s.j.size()
}

// Stamp numbers, encodes and journals ev at once, outside any queue (a refusal written before
// the connection serves; nil for an event the dialect does not send).
func (s *Stream) Stamp(ev Event) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stampLocked(ev)
}

// EncodeUnnumbered encodes ev with an event_id and without server_event_seq, under its GA name
// (a resume handshake's reply, which is no part of any session's stream).
func EncodeUnnumbered(ev Event) ([]byte, error) {
	return encodeEvent(ev, protocol.Envelope{Type: eventType(ev), EventID: NewEventID()})
}

// NewEventID returns a fresh event_id.
func NewEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "event_" + hex.EncodeToString(b[:])
}
