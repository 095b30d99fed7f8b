package realtime

import (
	"errors"
	"sync"

	"github.com/omniserve/omniserve/internal/session"
)

// Outbound queue errors.
var (
	ErrSlowClient = errors.New("client too slow: outbound queue full")
	ErrConnClosed = errors.New("connection closed")
)

// reserve is extra room for non-model events (errors, done, session.closed) so that a response
// can always end cleanly even when its deltas filled the queue.
const reserve = 64

// outQueue is the bounded per-connection send queue. The session actor pushes without blocking;
// the writer goroutine pops. DropStale implements the epoch fence for queued model output.
type outQueue struct {
	mu       sync.Mutex
	items    []session.Event
	max      int
	minEpoch int
	closed   bool
	failed   error
	notify   chan struct{}
}

func newOutQueue(max int) *outQueue {
	return &outQueue{max: max, notify: make(chan struct{}, 1)}
}

// Send implements session.Sink.
func (q *outQueue) Send(ev session.Event) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.failed != nil {
		return q.failed
	}
	if q.closed {
		return ErrConnClosed
	}
	if ev.Model && ev.Epoch < q.minEpoch {
		return nil // stale: its epoch already ended
	}
	limit := q.max
	if !ev.Model {
		limit += reserve
	}
	if len(q.items) >= limit {
		q.failed = ErrSlowClient
		q.wake()
		return ErrSlowClient
	}
	q.items = append(q.items, ev)
	q.wake()
	return nil
}

// DropStale implements session.Sink.
func (q *outQueue) DropStale(epoch int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if epoch <= q.minEpoch {
		return
	}
	q.minEpoch = epoch
	kept := q.items[:0]
	for _, ev := range q.items {
		if !ev.Model || ev.Epoch >= epoch {
			kept = append(kept, ev)
		}
	}
	clear(q.items[len(kept):])
	q.items = kept
}

func (q *outQueue) wake() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// take removes and returns the queued events; done is true once the queue is closed (or failed)
// and empty.
func (q *outQueue) take(buf []session.Event) (_ []session.Event, done bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.failed != nil {
		q.items = nil
		return buf, true
	}
	buf = append(buf, q.items...)
	clear(q.items)
	q.items = q.items[:0]
	return buf, q.closed && len(buf) == 0
}

// isStale reports whether a popped event became stale before it reached the wire.
func (q *outQueue) isStale(ev session.Event) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return ev.Model && ev.Epoch < q.minEpoch
}

// close stops accepting events; the writer drains what is queued and exits.
func (q *outQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wake()
}

// fail makes every later Send fail with err (the writer could not write).
func (q *outQueue) fail(err error) {
	q.mu.Lock()
	if q.failed == nil {
		q.failed = err
	}
	q.mu.Unlock()
	q.wake()
}

func (q *outQueue) err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.failed
}
