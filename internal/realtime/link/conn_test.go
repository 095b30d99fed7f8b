package link

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/protocol"
)

// pipe is an in-memory Transport: the test feeds inbound frames (or read errors) and reads what
// the core wrote; block makes writes hang until release is closed (the client reads again) or
// the write's ctx ends (a client not reading).
type pipe struct {
	in      chan any // []byte, *protocol.Error or error
	mu      sync.Mutex
	out     [][]byte
	block   bool
	release chan struct{}
	closed  []int           // close codes
	waits   []time.Duration // the close handshakes' bounds
	done    chan struct{}
}

func newPipe() *pipe { return &pipe{in: make(chan any, 16), done: make(chan struct{})} }

func (p *pipe) ReadFrame(ctx context.Context) ([]byte, error) {
	select {
	case v := <-p.in:
		switch v := v.(type) {
		case []byte:
			return v, nil
		case error:
			return nil, v
		}
	case <-p.done:
		return nil, errors.New("closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	panic("unreachable")
}

func (p *pipe) WriteFrame(ctx context.Context, data []byte) error {
	p.mu.Lock()
	block := p.block
	p.mu.Unlock()
	if block {
		select {
		case <-p.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out = append(p.out, data)
	return nil
}

func (p *pipe) Close(code int, _ string, wait time.Duration) {
	p.mu.Lock()
	p.closed = append(p.closed, code)
	p.waits = append(p.waits, wait)
	p.mu.Unlock()
	select {
	case <-p.done:
	default:
		close(p.done)
	}
}

func (p *pipe) written(t *testing.T) (types []string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.out {
		var m map[string]any
		require.NoError(t, json.Unmarshal(f, &m))
		types = append(types, m["type"].(string))
	}
	return types
}

func ev(typ string) Event { return Event{Type: typ, Fields: map[string]any{}} }

// TestConnDispatchAndClose: frames reach the handler in wire order, a refused frame and a
// handler's refusal get their reply on the connection, and Close with a code writes what is
// queued before the transport closes; both goroutines are waited for.
func TestConnDispatchAndClose(t *testing.T) {
	p := newPipe()
	q := NewQueue(16, 1<<20, false)
	st := NewStream(false, nil)
	st.Attach(q, 0)
	c := New(context.Background(), p, q, Options{WriteTimeout: time.Second, DrainTimeout: time.Second})
	var mu sync.Mutex
	var got []string
	h := func(_ context.Context, f Frame) (*Event, error) {
		mu.Lock()
		defer mu.Unlock()
		if f.Refused != nil {
			got = append(got, "refused:"+f.Refused.Code)
			e := ev("error")
			return &e, nil
		}
		got = append(got, string(f.Data))
		return nil, nil
	}
	p.in <- []byte("a")
	p.in <- &protocol.Error{Code: "event_too_large"}
	p.in <- []byte("b")
	done := make(chan struct{})
	var loss Loss
	served := make(chan struct{})
	go func() { defer close(served); loss = c.Serve(st, [][]byte{[]byte(`{"type":"pre"}`)}, h, done) }()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 3 }, 5*time.Second, time.Millisecond)
	require.Equal(t, []string{"a", "refused:event_too_large", "b"}, got)
	require.NoError(t, st.Send(ev("session.closed")))
	close(done)
	<-served
	require.Equal(t, Ended, loss)
	c.Close(1000, "bye")
	require.Equal(t, []string{"pre", "error", "session.closed"}, p.written(t))
	require.Equal(t, []int{1000}, p.closed)
}

// TestConnLosses: what ends a connection comes back from Serve as its loss.
func TestConnLosses(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(p *pipe, st *Stream, q *Queue)
		opts Options
		want Loss
	}{
		{"a dropped network", func(p *pipe, _ *Stream, _ *Queue) { p.in <- errors.New("reset") }, Options{}, LostRead},
		{"a close frame", func(p *pipe, _ *Stream, _ *Queue) { p.in <- fmt.Errorf("%w: 1000", ErrPeerClosed) }, Options{}, LostClosed},
		{"an overflow", func(p *pipe, st *Stream, _ *Queue) {
			p.mu.Lock()
			p.block = true
			p.mu.Unlock()
			for range 2 + reserve + 2 {
				_ = st.Send(Event{Type: "x", Model: true, Fields: map[string]any{}})
			}
		}, Options{WriteTimeout: time.Minute}, LostSlow},
		{"a write that times out", func(p *pipe, st *Stream, _ *Queue) {
			p.mu.Lock()
			p.block = true
			p.mu.Unlock()
			_ = st.Send(ev("x"))
		}, Options{WriteTimeout: 50 * time.Millisecond}, LostSlow},
		{"a stalled reader", func(p *pipe, st *Stream, _ *Queue) {
			p.mu.Lock()
			p.block = true
			p.mu.Unlock()
			_ = st.Send(ev("x"))
			_ = st.Send(ev("y"))
		}, Options{WriteTimeout: time.Minute, StallTimeout: 50 * time.Millisecond}, LostSlow},
		{"a resume elsewhere", func(_ *pipe, st *Stream, _ *Queue) { st.Attach(NewQueue(2, 1<<20, true), 0) }, Options{}, LostReplaced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPipe()
			q := NewQueue(2, 1<<20, false)
			st := NewStream(false, nil)
			st.Attach(q, 0)
			tc.opts.DrainTimeout = 10 * time.Millisecond
			c := New(context.Background(), p, q, tc.opts)
			h := func(context.Context, Frame) (*Event, error) { return nil, nil }
			go tc.run(p, st, q)
			require.Equal(t, tc.want, c.Serve(st, nil, h, nil))
			c.Close(0, "")
		})
	}
}

// TestConnSlowClientClose: a write blocked past the write timeout is a client not reading
// (LostSlow), but the write is not cut: a client that reads again still gets the frame in
// flight, and Close gives the close frame SlowCloseWait without waiting to drain the queue.
func TestConnSlowClientClose(t *testing.T) {
	p := newPipe()
	p.block, p.release = true, make(chan struct{})
	q := NewQueue(16, 1<<20, false)
	st := NewStream(false, nil)
	st.Attach(q, 0)
	c := New(context.Background(), p, q, Options{WriteTimeout: 50 * time.Millisecond,
		DrainTimeout: time.Minute, SlowCloseWait: 7 * time.Second})
	require.NoError(t, st.Send(ev("x")))
	h := func(context.Context, Frame) (*Event, error) { return nil, nil }
	require.Equal(t, LostSlow, c.Serve(st, nil, h, nil))
	require.ErrorIs(t, q.Err(), ErrWriteTimeout)
	close(p.release) // the client reads again
	require.Eventually(t, func() bool { return len(p.written(t)) == 1 }, 5*time.Second, time.Millisecond,
		"the frame in flight is delivered")
	start := time.Now()
	c.Close(1008, "connection too slow")
	require.Less(t, time.Since(start), 10*time.Second, "no drain wait for a client found not reading")
	require.Equal(t, []int{1008}, p.closed)
	require.Equal(t, []time.Duration{7 * time.Second}, p.waits)
	require.Equal(t, []string{"x"}, p.written(t))
}

func TestWatchPeriod(t *testing.T) {
	for _, tc := range []struct {
		write, stall, want time.Duration
	}{
		{0, 0, 0},
		{5 * time.Second, 0, 500 * time.Millisecond},
		{0, 10 * time.Second, time.Second},
		{5 * time.Second, 10 * time.Second, 500 * time.Millisecond},
		{time.Millisecond, 0, 10 * time.Millisecond},
	} {
		require.Equal(t, tc.want, watchPeriod(Options{WriteTimeout: tc.write, StallTimeout: tc.stall}), "%v/%v", tc.write, tc.stall)
	}
}

// TestConnFirst: a handshake takes the first frame before the connection serves; the next one
// waits for Start.
func TestConnFirst(t *testing.T) {
	p := newPipe()
	q := NewQueue(4, 1<<20, false)
	c := New(context.Background(), p, q, Options{})
	_, err := c.First(20 * time.Millisecond)
	require.ErrorIs(t, err, ErrFirstTimeout)
	p.in <- []byte("hello")
	p.in <- []byte("next")
	f, err := c.First(time.Second)
	require.NoError(t, err)
	require.Equal(t, "hello", string(f.Data))
	st := NewStream(false, nil)
	st.Attach(q, 0)
	got := make(chan string, 1)
	c.Start(st, nil, func(_ context.Context, f Frame) (*Event, error) { got <- string(f.Data); return nil, nil })
	require.Equal(t, "next", <-got)
	c.Close(0, "")
}
