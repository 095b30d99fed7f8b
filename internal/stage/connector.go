package stage

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// connector is the in-process edge between two stages for one request (or one response of a
// duplex stream): a bounded queue of encoded payloads with the accounting of reference spec
// §3.2. The TX side (size_bytes, tx_time_ms) is reported by Send; the RX side (bytes received,
// rx_decode_time_ms, in_flight_time_ms) accumulates in the receiver's RxStats and goes into the
// receiving stage's StageRequestStats rx_* fields.
//
// The payload is the UTF-8 text delta: that is what crosses the edge, so size_bytes is exactly
// the bytes the talker receives.
type connector struct {
	from, to int
	ch       chan connItem

	mu sync.Mutex // guards rx (read by the receiver, and by tests)
	rx RxStats
}

type connItem struct {
	payload []byte
	sentAt  time.Time // monotonic; when the item entered the queue
	end     bool      // control item: the sender is done; reason says why
	reason  string
}

// RxStats is the receiving side of one connector edge.
type RxStats struct {
	Items      int
	Bytes      int64
	DecodeMs   float64
	InFlightMs float64
}

// TxStats is what one Send measured.
type TxStats struct {
	SizeBytes int64
	TxMs      float64
}

func newConnector(from, to, capacity int) *connector {
	return &connector{from: from, to: to, ch: make(chan connItem, capacity)}
}

// Send encodes text and queues it, waiting while the queue is full (back-pressure) or until
// ctx ends. TX time covers encoding and queueing, as the reference's put does.
func (c *connector) Send(ctx context.Context, text string) (TxStats, error) {
	t0 := time.Now()
	it := connItem{payload: []byte(text)}
	it.sentAt = time.Now()
	select {
	case c.ch <- it:
	case <-ctx.Done():
		return TxStats{}, fmt.Errorf("sending on connector %d->%d: %w", c.from, c.to, ctx.Err())
	}
	return TxStats{SizeBytes: int64(len(it.payload)), TxMs: msSince(t0)}, nil
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
	c.rx.InFlightMs += float64(arrived.Sub(it.sentAt)) / float64(time.Millisecond)
	c.mu.Unlock()
	return text, false, "", nil
}

// RxStats returns the receiver's totals so far.
func (c *connector) RxStats() RxStats {
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
