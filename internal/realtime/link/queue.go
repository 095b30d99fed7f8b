package link

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/omniserve/omniserve/internal/protocol"
)

// Outbound queue errors.
var (
	ErrSlowClient = errors.New("client too slow: outbound queue full")
	ErrConnClosed = errors.New("connection closed")
	// ErrStalled: the oldest undelivered event waited longer than the stall timeout.
	ErrStalled = fmt.Errorf("%w: an event waited longer than the stall timeout", ErrSlowClient)
	// ErrWriteTimeout: a write was blocked longer than the write timeout.
	ErrWriteTimeout = fmt.Errorf("%w: a write blocked longer than the write timeout", ErrSlowClient)
)

// reserve is extra room for non-model events (errors, done, session.closed) so that a response
// can always end cleanly even when its deltas filled the queue.
const reserve = 64

// Queue is the bounded per-connection send queue. The session's stream pushes without
// blocking; the connection's writer goroutine pops (through the stream, which numbers what it
// pops). DropStale implements the epoch fence for queued model output.
type Queue struct {
	mu       sync.Mutex
	items    []Event
	at       []time.Time // when each item was queued (the head's age says whether the client reads)
	max      int
	bytes    int // eventBytes of items
	maxBytes int // bound on bytes (a client that lets more pile up is too slow)
	minEpoch int
	closed   bool
	failed   error
	dead     chan struct{} // closed when failed is set: the connection watches it
	notify   chan struct{}
	// keep: the session is resumable, so events are kept after a failure (the writer could not
	// write, or the queue overflowed) until the connection is detached and its stream journals
	// them; without it they are dropped and the session ends.
	keep bool
}

// NewQueue returns a queue of at most max model events and maxBytes (estimated); keep: the
// session is resumable (see the keep field).
func NewQueue(max, maxBytes int, keep bool) *Queue {
	return &Queue{max: max, maxBytes: maxBytes, keep: keep, dead: make(chan struct{}), notify: make(chan struct{}, 1)}
}

// eventBytes estimates what an event takes on the wire (its strings, keys and a few bytes per
// number), without encoding it.
func eventBytes(ev Event) int {
	if ev.Payload != nil {
		return 64 + len(ev.Type) + protocol.WireSize(ev.Payload)
	}
	return 64 + len(ev.Type) + valueBytes(ev.Fields)
}

func valueBytes(v any) int {
	switch v := v.(type) {
	case string:
		return len(v) + 2
	case map[string]any:
		n := 2
		for k, x := range v {
			n += len(k) + 4 + valueBytes(x)
		}
		return n
	case []any:
		n := 2
		for _, x := range v {
			n += 1 + valueBytes(x)
		}
		return n
	case []string:
		n := 2
		for _, x := range v {
			n += len(x) + 3
		}
		return n
	case map[string]string:
		n := 2
		for k, x := range v {
			n += len(k) + len(x) + 6
		}
		return n
	}
	return 8
}

// Send queues ev without blocking; an error means the client is gone or too slow.
func (q *Queue) Send(ev Event) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.failed != nil {
		if q.keep && !q.closed {
			q.push(ev)
			return nil
		}
		return q.failed
	}
	if q.closed {
		return ErrConnClosed
	}
	if ev.Model && ev.Epoch < q.minEpoch {
		return nil // stale: its epoch already ended
	}
	limit, limitBytes := q.max, q.maxBytes
	if !ev.Model {
		// The reserve in bytes: the events that end a response, and the echo of a client's own
		// item (conversation.item.added and .done both carry a 10 MB function_call_output),
		// fit past what model output may fill. A client that reads is not too slow for them.
		limit, limitBytes = limit+reserve, 2*q.maxBytes
	}
	n := eventBytes(ev)
	if len(q.items) >= limit || (len(q.items) > 0 && q.bytes+n > limitBytes) {
		q.failLocked(ErrSlowClient)
		q.wake()
		if q.keep {
			q.push(ev)
			return nil
		}
		return ErrSlowClient
	}
	q.push(ev)
	q.bytes += n
	q.wake()
	return nil
}

// DropStale removes queued model output of epochs before epoch and refuses any later.
func (q *Queue) DropStale(epoch int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if epoch <= q.minEpoch {
		return
	}
	q.minEpoch = epoch
	kept, keptAt := q.items[:0], q.at[:0]
	for i, ev := range q.items {
		if !ev.Model || ev.Epoch >= epoch {
			kept, keptAt = append(kept, ev), append(keptAt, q.at[i])
		} else {
			q.bytes -= eventBytes(ev)
		}
	}
	clear(q.items[len(kept):])
	q.items, q.at = kept, keptAt
}

func (q *Queue) wake() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// pop removes the oldest queued event; ok is false when there is none, and done is then true
// once the queue is closed (or failed): the writer stops. A failed queue of a resumable session
// keeps its events for the journal.
func (q *Queue) pop() (ev Event, ok, done bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.failed != nil {
		if !q.keep {
			q.items, q.at = nil, nil
			q.bytes = 0
		}
		return Event{}, false, true
	}
	if len(q.items) == 0 {
		return Event{}, false, q.closed
	}
	ev = q.items[0]
	q.bytes -= eventBytes(ev)
	q.items[0] = Event{}
	q.items, q.at = q.items[1:], q.at[1:]
	if len(q.items) == 0 {
		q.items, q.at = q.items[:0:0], q.at[:0:0] // let the backing arrays go once drained
	}
	return ev, true, false
}

// takeAll removes and returns every queued event, failed or not.
func (q *Queue) takeAll() []Event {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items, q.at = nil, nil
	q.bytes = 0
	return items
}

// Close stops accepting events; the writer drains what is queued and exits.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wake()
}

// Fail makes every later Send fail with err (the writer could not write), or, for a resumable
// session, keep its events for the journal until the connection is detached.
func (q *Queue) Fail(err error) {
	q.mu.Lock()
	q.failLocked(err)
	q.mu.Unlock()
	q.wake()
}

func (q *Queue) failLocked(err error) {
	if q.failed == nil {
		q.failed = err
		close(q.dead)
	}
}

// failedC is closed once the queue has failed (its err says why).
func (q *Queue) failedC() <-chan struct{} { return q.dead }

// Err is why the queue failed (nil: it has not).
func (q *Queue) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.failed
}

// push appends ev with its queueing time; q.mu is held.
func (q *Queue) push(ev Event) {
	q.items = append(q.items, ev)
	q.at = append(q.at, time.Now())
}

// headAge is how long the oldest undelivered event has waited (0 when none is queued).
func (q *Queue) headAge(now time.Time) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.at) == 0 || q.failed != nil {
		return 0
	}
	return now.Sub(q.at[0])
}
