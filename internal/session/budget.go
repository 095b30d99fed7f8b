package session

import (
	"context"
	"sync"
)

// Default byte budgets of one session (ManagerConfig; docs/CONFIG.md lists every buffer).
const (
	defaultMaxInboxBytes   = 16 << 20
	defaultMaxHistoryBytes = 4 << 20
	// commandOverhead is what a command without a payload counts against the inbox budget.
	commandOverhead = 256
)

// byteBudget bounds the bytes of the commands waiting in a session's inbox. One goroutine (the
// connection's reader) acquires, the actor releases; a command larger than the whole budget
// still passes when nothing else waits, so that any event the frame limit admits is handled.
type byteBudget struct {
	mu    sync.Mutex
	used  int
	limit int
	freed chan struct{} // buffered(1): bytes were released
}

func newByteBudget(limit int) *byteBudget {
	return &byteBudget{limit: limit, freed: make(chan struct{}, 1)}
}

// acquire waits until n bytes fit (the reader stops reading, and TCP pushes back on the
// client) or ctx ends.
func (b *byteBudget) acquire(ctx context.Context, n int) error {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.limit {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		b.mu.Unlock()
		select {
		case <-b.freed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

func (b *byteBudget) release(n int) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	select {
	case b.freed <- struct{}{}:
	default:
	}
}

// inUse reports the bytes held (tests).
func (b *byteBudget) inUse() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// commandBytes is what a command holds in memory while it waits in the inbox: its decoded
// payload plus a fixed overhead.
func commandBytes(c Command) int {
	n := commandOverhead
	switch c := c.(type) {
	case *AppendAudio:
		n += len(c.Data)
	case *CreateItem:
		n += len(c.Audio) + len(c.Text)
	case *UpdateSession:
		if c.Patch.Instructions != nil {
			n += len(*c.Patch.Instructions)
		}
	case *CreateResponse:
		if c.Instructions != nil {
			n += len(*c.Instructions)
		}
		for _, in := range c.Input {
			n += len(in.Text) + len(in.Ref)
		}
	}
	return n
}
