package session

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// evictCounter is a ManagerMetrics that counts evictions.
type evictCounter struct {
	mu        sync.Mutex
	evictions int
	detached  int
}

func (e *evictCounter) AddDetachedSessions(d int) { e.mu.Lock(); e.detached += d; e.mu.Unlock() }
func (e *evictCounter) CountPanic(string)         {}
func (e *evictCounter) CountEviction()            { e.mu.Lock(); e.evictions++; e.mu.Unlock() }

// TestEvictOldestDetached: with every slot taken, a new client is admitted by ending the oldest
// session kept for a resume (reason evicted, its turn finalized as a close, a resume finds it
// gone); with no detached session the new client is refused at once.
func TestEvictOldestDetached(t *testing.T) {
	t.Parallel()
	mc := &evictCounter{}
	m := NewManager(ManagerConfig{MaxSessions: 2, ResumeGrace: time.Minute, Metrics: mc}, &fakeBackend{&fakeEngine{t: t}}, zap.NewNop())
	ctx := context.Background()
	type run struct {
		s    *Session
		sk   *sink
		wait func() string
	}
	start := func() run {
		sk := &sink{ch: make(chan Event, 1024)}
		s, wait := runSession(t, m, Options{}, sk, manual16k)
		return run{s, sk, wait}
	}
	a, b := start(), start()
	_, err := m.Acquire(ctx)
	require.ErrorIs(t, err, errCapacity, "no detached session: refused at once")

	a.s.Disconnected(0)
	require.Eventually(t, func() bool { return m.Detached() == 1 }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(2 * time.Millisecond) // b detaches later: a is the oldest
	b.s.Disconnected(0)
	require.Eventually(t, func() bool { return m.Detached() == 2 }, 5*time.Second, 5*time.Millisecond)

	slot, err := m.Acquire(ctx)
	require.NoError(t, err, "the oldest detached session gives its slot")
	defer slot.Release()
	require.Equal(t, ReasonEvicted, a.wait())
	require.Equal(t, 1, m.Detached(), "the newer detached session is kept")
	require.Nil(t, m.Lookup(a.s.id), "a resume of the evicted session finds nothing")
	require.NotNil(t, m.Lookup(b.s.id))
	// The gauge moves just after the session's own bookkeeping, on its goroutine.
	require.Eventually(t, func() bool {
		mc.mu.Lock()
		defer mc.mu.Unlock()
		return mc.evictions == 1 && mc.detached == 1
	}, 5*time.Second, 5*time.Millisecond, "one eviction counted, one session still detached")

	b.s.Stop(ReasonShutdown)
	b.wait()
}
