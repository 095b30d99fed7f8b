package stage

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// connector is the in-process edge between two stages for one request (or one response of a
// duplex stream): a bounded queue of encoded payloads with vllm-omni's connector accounting.
// The TX side (size_bytes, tx_time_ms) is reported by Send; the RX side (bytes received,
// rx_decode_time_ms, in_flight_time_ms) accumulates in the receiver's rxStats and goes into the
// receiving stage's StageRequestStats rx_* fields.
//
// The payload is the UTF-8 text delta: that is what crosses the edge, so size_bytes is exactly
// the bytes the talker receives.
type connector struct {
	from, to int
	ch       chan connItem

	mu      sync.Mutex // guards rx and lastArr (read by the receiver, and by tests)
	rx      rxStats
	lastArr time.Time // latest arrival so far: in-flight time is the union of intervals
}

type connItem struct {
	payload []byte
	sentAt  time.Time // monotonic; when the item entered the queue
	end     bool      // control item: the sender is done; reason says why
	reason  string
}

// rxStats is the receiving side of one connector edge.
type rxStats struct {
	Items    int
	Bytes    int64
	DecodeMs float64
	// InFlightMs is the time at least one item was in the queue: the union of the items'
	// [sent, received] intervals, so it never exceeds the edge's wall time (a sum of per-item
	// waits would count overlapping waits many times).
	InFlightMs float64
}

// txStats is what one Send measured.
type txStats struct {
	SizeBytes int64
	// TxMs is the hand-off cost: encoding and enqueueing, without BlockedMs.
	TxMs float64
	// BlockedMs is the time the send waited for room on a full queue (backpressure).
	BlockedMs float64
}

func newConnector(from, to, capacity int) *connector {
	return &connector{from: from, to: to, ch: make(chan connItem, capacity)}
}

// Send encodes text and queues it, waiting while the queue is full (backpressure) or until ctx
// ends. TX time is the hand-off cost (encoding and enqueueing); the wait for room is reported
// apart as BlockedMs, so a slow receiver does not show up as a slow transfer.
func (c *connector) Send(ctx context.Context, text string) (txStats, error) {
	t0 := time.Now()
	it := connItem{payload: []byte(text)}
	it.sentAt = time.Now()
	var blocked time.Duration
	select {
	case c.ch <- it:
	default:
		b0 := time.Now()
		select {
		case c.ch <- it:
		case <-ctx.Done():
			return txStats{}, fmt.Errorf("sending on connector %d->%d: %w", c.from, c.to, ctx.Err())
		}
		blocked = time.Since(b0)
	}
	total := time.Since(t0)
	return txStats{
		SizeBytes: int64(len(it.payload)),
		TxMs:      float64(total-blocked) / float64(time.Millisecond),
		BlockedMs: float64(blocked) / float64(time.Millisecond),
	}, nil
}

// End queues the end marker with the sender's finish reason.
func (c *connector) End(ctx context.Context, reason string) error {
	select {
	case c.ch <- connItem{end: true, reason: reason, sentAt: time.Now()}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ending connector %d->%d: %w", c.from, c.to, ctx.Err())
	}
}

// Recv waits for the next item and decodes it. It returns end=true with the finish reason
// after the end marker.
func (c *connector) Recv(ctx context.Context) (text string, end bool, reason string, err error) {
	var it connItem
	select {
	case it = <-c.ch:
	case <-ctx.Done():
		return "", false, "", fmt.Errorf("receiving on connector %d->%d: %w", c.from, c.to, ctx.Err())
	}
	arrived := time.Now()
	if it.end {
		return "", true, it.reason, nil
	}
	text = string(it.payload)
	decodeMs := msSince(arrived)
	c.mu.Lock()
	c.rx.Items++
	c.rx.Bytes += int64(len(it.payload))
	c.rx.DecodeMs += decodeMs
	// Items leave in FIFO order, so intervals are ordered by start and by end: the union grows
	// by the part of this item's interval after the previous arrival.
	if from := maxTime(it.sentAt, c.lastArr); arrived.After(from) {
		c.rx.InFlightMs += float64(arrived.Sub(from)) / float64(time.Millisecond)
	}
	if arrived.After(c.lastArr) {
		c.lastArr = arrived
	}
	c.mu.Unlock()
	return text, false, "", nil
}

// RxStats returns the receiver's totals so far.
func (c *connector) RxStats() rxStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rx
}

// Drop discards every queued item so an aborted request's payloads are freed at once, not when
// the last reference goes away. It returns how many items it dropped.
func (c *connector) Drop() int {
	n := 0
	for {
		select {
		case <-c.ch:
			n++
		default:
			return n
		}
	}
}

// Len is the number of queued items.
func (c *connector) Len() int { return len(c.ch) }

func msSince(t time.Time) float64 {
	return float64(time.Since(t)) / float64(time.Millisecond)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
