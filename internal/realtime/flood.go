package realtime

import (
	"sync"
	"time"

	"github.com/coder/websocket"
)

// ReasonInvalidEvents ends a session whose client sent more invalid events than its budget
// (HandlerConfig.InvalidEventBurst, InvalidEventRate): session.closed carries it, and the
// WebSocket closes with 1008 "too many invalid events".
const ReasonInvalidEvents = "too_many_invalid_events"

// The close of a session ended by ReasonInvalidEvents.
const (
	invalidEventsClose  = websocket.StatusPolicyViolation
	invalidEventsReason = "too many invalid events"
)

// InvalidEventCounter counts what clients get wrong (internal/metrics implements it over the
// server's Prometheus registry): every invalid event by dialect and reason (its error code, or
// invalid_event_ack), and every session closed for sending too many.
type InvalidEventCounter interface {
	CountInvalidEvent(dialect, reason string)
	CountInvalidEventClose(dialect string)
}

// floodGuard bounds the error events one session's client can provoke: a token bucket of
// burst events refilled at rate per second. An error is an event the client must act on and,
// on a numbered stream, acknowledge; a client that answers errors with more bad events (or a
// hostile one) must meet a bound, not a loop. Within the budget every invalid event gets its
// error; the first one over it ends the session (ReasonInvalidEvents), and no later one gets an
// error. Invalid acknowledgements spend the budget too but are never answered. A nil guard
// admits everything (a sideband, which has no session of its own).
//
// The reader (refused frames) and the session's actor (errors of refused commands, through the
// sink) both report here, hence the lock.
type floodGuard struct {
	dialect string
	burst   float64
	rate    float64
	count   InvalidEventCounter
	now     func() time.Time

	mu      sync.Mutex
	tokens  float64
	last    time.Time
	tripped bool
	stop    func(reason string) // ends the session; set once the session exists
}

func newFloodGuard(burst int, rate float64, dialect string, count InvalidEventCounter) *floodGuard {
	return &floodGuard{dialect: dialect, burst: float64(burst), rate: rate, count: count, now: time.Now,
		tokens: float64(burst), last: time.Now()}
}

// bind makes stop the guard's way to end the session once the budget is spent.
func (g *floodGuard) bind(stop func(reason string)) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.stop = stop
	g.mu.Unlock()
}

// admit records one invalid event (reason: its error code) and reports whether its error event
// may go out.
func (g *floodGuard) admit(reason string) bool {
	if g == nil {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.count != nil {
		g.count.CountInvalidEvent(g.dialect, reason)
	}
	if g.tripped {
		return false
	}
	now := g.now()
	g.tokens = min(g.burst, g.tokens+now.Sub(g.last).Seconds()*g.rate)
	g.last = now
	if g.tokens >= 1 {
		g.tokens--
		return true
	}
	g.tripped = true
	if g.count != nil {
		g.count.CountInvalidEventClose(g.dialect)
	}
	if g.stop != nil {
		g.stop(ReasonInvalidEvents) // never blocks (session.Stop)
	}
	return false
}

// spent reports whether the budget ran out (the session is ending): the reader stops reading.
func (g *floodGuard) spent() bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.tripped
}
