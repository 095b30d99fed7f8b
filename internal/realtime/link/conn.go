package link

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/protocol"
)

// Transport is what one kind of connection supplies to the core: how to read one frame, how to
// write one frame, how to close. Everything else (dispatch in wire order, the one writer, the
// bounded queue, the stalled-reader rule, the close path) is the core's.
type Transport interface {
	// ReadFrame blocks until the next inbound frame. A frame the connection survives but that is
	// not an event (too large, not text) returns a *protocol.Error, its refusal; an error that
	// wraps ErrPeerClosed is the peer closing on purpose; any other error ends the connection as
	// dropped. It is called from one goroutine at a time.
	ReadFrame(ctx context.Context) ([]byte, error)
	// WriteFrame writes one frame; it ends with ctx (the connection's). It is called from one
	// goroutine at a time.
	WriteFrame(ctx context.Context, data []byte) error
	// Close ends the connection: with a close frame (code, reason) when code is not 0, at once
	// otherwise. The close frame (after a write still in flight) and the peer's answer may take
	// at most wait. It returns once a pending ReadFrame or WriteFrame will return.
	Close(code int, reason string, wait time.Duration)
}

// ErrPeerClosed marks a read error that is the peer's decision to close (a WebSocket close
// frame), not a dropped network.
var ErrPeerClosed = errors.New("the peer closed the connection")

// ErrFirstTimeout is First's error when no frame came in time.
var ErrFirstTimeout = errors.New("no frame within the handshake timeout")

// Loss is why Serve returned: the connection was lost, or what it carried ended.
type Loss int

// The losses.
const (
	LostRead     Loss = iota // the read failed without a close frame: the network dropped
	LostClosed               // the peer closed on purpose (a close frame)
	LostSlow                 // a write timed out, or the queue overflowed or stalled: the client stopped reading
	LostReplaced             // a resume moved the session to another connection
	Ended                    // not lost: what the connection carries ended first (Serve's done)
)

// Frame is one inbound frame, as the handler gets it: its data, or the refusal of a frame the
// connection survives.
type Frame struct {
	Data    []byte
	Refused *protocol.Error
}

// Handler acts on one inbound frame, in wire order, on the reader goroutine (so a handler that
// blocks holds back the reading: backpressure reaches the peer). reply, when not nil, is queued
// on this connection (the frame's error event). A non-nil err ends the dispatch: what the
// connection carries has ended, and its end closes the connection.
type Handler func(ctx context.Context, f Frame) (reply *Event, err error)

// Options are the core's bounds and hooks.
type Options struct {
	// WriteTimeout bounds one frame write (0: the transport bounds its writes itself): Serve's
	// watch takes a write blocked longer for a client that stopped reading (LostSlow). The write
	// itself is not cancelled: a client that reads again still gets the frame in flight and then
	// the close frame with its reason (SlowCloseWait).
	WriteTimeout time.Duration
	// StallTimeout bounds the age of the oldest undelivered event (0: no stall watch): a client
	// that lets an event wait longer is not reading, whatever the buffers, and is LostSlow.
	StallTimeout time.Duration
	// OnStall counts a connection found stalled (nil: not counted).
	OnStall func()
	// DrainTimeout bounds how long Close with a code waits for the queued events to be written.
	DrainTimeout time.Duration
	// CloseWait bounds the close handshake (0: one second). SlowCloseWait bounds it for a client
	// found not reading (0: CloseWait): the frame in flight and the close frame wait that long
	// for it to read again, so that a client that was only paused learns why it was closed.
	CloseWait, SlowCloseWait time.Duration
	Log                      *zap.Logger
}

// Conn is the connection core (doc.go): one reader goroutine that dispatches frames in wire
// order, one writer goroutine that writes what the stream numbers from the queue, the owner's
// watch (Serve) and one close path (Close).
type Conn struct {
	t    Transport
	q    *Queue
	opts Options
	log  *zap.Logger

	ctx    context.Context // ends when the connection is closed
	cancel context.CancelFunc
	first  chan firstFrame // the frame a handshake asked for (First), before Start
	lost   chan Loss

	// Set by Start before serving is closed; read by the reader and the writer after it.
	st      *Stream
	pre     [][]byte
	handle  Handler
	serving chan struct{}
	started bool // the writer runs (owner's goroutine only)

	readerDone chan struct{}
	readErr    error // what ended the reader; read after readerDone is closed
	writerDone chan struct{}
	// writingSince is when the write in flight began (unix ns; 0 when none is). It is left set
	// after a failed write: a write that timed out closes the socket, and the reader, failing
	// next, must still learn that the client stopped reading rather than dropped.
	writingSince atomic.Int64
}

type firstFrame struct {
	f   Frame
	err error
}

// New starts the reader of t (it holds the frames it reads until First or Start takes them);
// the connection ends with parent or Close. q is the connection's queue.
func New(parent context.Context, t Transport, q *Queue, opts Options) *Conn {
	if opts.Log == nil {
		opts.Log = zap.NewNop()
	}
	if opts.CloseWait <= 0 {
		opts.CloseWait = time.Second
	}
	if opts.SlowCloseWait <= 0 {
		opts.SlowCloseWait = opts.CloseWait
	}
	ctx, cancel := context.WithCancel(parent)
	c := &Conn{t: t, q: q, opts: opts, log: opts.Log, ctx: ctx, cancel: cancel,
		first: make(chan firstFrame), lost: make(chan Loss, 3), serving: make(chan struct{}),
		readerDone: make(chan struct{}), writerDone: make(chan struct{})}
	go c.readLoop()
	return c
}

// Context ends when the connection is closed.
func (c *Conn) Context() context.Context { return c.ctx }

// First waits up to timeout for the first frame (a handshake, before Start). err is
// ErrFirstTimeout when none came in time, or the error that ended the connection.
func (c *Conn) First(timeout time.Duration) (Frame, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-c.first:
		return r.f, r.err
	case <-timer.C:
		return Frame{}, ErrFirstTimeout
	}
}

// Start serves the connection for st: the writer writes pre, then what st numbers from the
// queue; the reader hands each frame to h. Serve is Start and the owner's watch.
func (c *Conn) Start(st *Stream, pre [][]byte, h Handler) {
	c.st, c.pre, c.handle = st, pre, h
	c.started = true
	close(c.serving)
	go c.writeLoop()
}

// Serve starts the connection (Start) and watches it, on the caller's goroutine, until done is
// closed (Ended) or the connection is lost: a read or write failed, the queue overflowed, its
// oldest event waited past the stall timeout, or a resume took the session. The caller then
// decides what the loss means and closes the connection (Close).
func (c *Conn) Serve(st *Stream, pre [][]byte, h Handler, done <-chan struct{}) Loss {
	c.Start(st, pre, h)
	var stall <-chan time.Time
	if period := watchPeriod(c.opts); period > 0 {
		tick := time.NewTicker(period)
		defer tick.Stop()
		stall = tick.C
	}
	failed := c.q.failedC()
	for {
		select {
		case <-done:
			return Ended
		case l := <-c.lost:
			return l
		case <-stall:
			c.checkStall()
		case <-failed:
			// An overflow is known at once, not when the writer (maybe blocked in a write) next
			// looks at the queue. A failed write is reported by the writer, which knows why.
			failed = nil
			switch err := c.q.Err(); {
			case errors.Is(err, errDetached):
				return LostReplaced
			case errors.Is(err, ErrSlowClient):
				return LostSlow
			}
		}
	}
}

// watchPeriod is how often Serve looks for a stalled client: a tenth of the shorter of the
// write and stall timeouts (0: neither is set, no watch).
func watchPeriod(o Options) time.Duration {
	d := o.StallTimeout
	if o.WriteTimeout > 0 && (d <= 0 || o.WriteTimeout < d) {
		d = o.WriteTimeout
	}
	if d <= 0 {
		return 0
	}
	return max(d/10, 10*time.Millisecond)
}

// checkStall fails the queue as too slow when the write in flight has been blocked longer than
// the write timeout, or its oldest undelivered event has waited longer than the stall timeout.
func (c *Conn) checkStall() {
	now := time.Now()
	if since := c.writingSince.Load(); c.opts.WriteTimeout > 0 && since != 0 && c.q.Err() == nil {
		if blocked := now.Sub(time.Unix(0, since)); blocked > c.opts.WriteTimeout {
			c.log.Warn("realtime client is not reading: a write blocked past the write timeout",
				zap.Duration("blocked", blocked), zap.Duration("write_timeout", c.opts.WriteTimeout))
			c.q.Fail(ErrWriteTimeout)
			return
		}
	}
	if c.opts.StallTimeout <= 0 {
		return
	}
	age := c.q.headAge(now)
	if age <= c.opts.StallTimeout {
		return
	}
	c.log.Warn("realtime client is not reading: an event waited past the stall timeout",
		zap.Duration("age", age), zap.Duration("stall_timeout", c.opts.StallTimeout))
	if c.opts.OnStall != nil {
		c.opts.OnStall()
	}
	c.q.Fail(ErrStalled)
}

// Close is the one close path: the queue takes no more events; with a code, what is queued
// (session.closed) goes out first, for at most DrainTimeout; then the transport closes with
// code and reason (0: at once), and Close waits for the reader and the writer. A client found
// not reading gets no drain (nothing more is written to it) but SlowCloseWait to read what was
// in flight and the close frame: its session has already let it go.
func (c *Conn) Close(code int, reason string) {
	c.q.Close()
	wait := c.opts.CloseWait
	switch {
	case errors.Is(c.q.Err(), ErrSlowClient):
		wait = c.opts.SlowCloseWait
	case code != 0 && c.started:
		timer := time.NewTimer(c.opts.DrainTimeout)
		select {
		case <-c.writerDone:
		case <-timer.C:
		}
		timer.Stop()
	}
	c.t.Close(code, reason, wait)
	c.cancel()
	<-c.readerDone
	if c.started {
		<-c.writerDone
	}
}

// Refuse writes data (one encoded event; nil: none) on a connection that serves nothing, and
// closes it with code and reason.
func (c *Conn) Refuse(data []byte, code int, reason string) {
	if data != nil {
		// Nobody watches this write (Serve does not run): it is bounded here.
		ctx, cancel := c.ctx, context.CancelFunc(func() {})
		if c.opts.WriteTimeout > 0 {
			ctx, cancel = context.WithTimeout(c.ctx, c.opts.WriteTimeout)
		}
		_ = c.t.WriteFrame(ctx, data)
		cancel()
	}
	c.Close(code, reason)
}

func (c *Conn) lose(l Loss) {
	select {
	case c.lost <- l:
	default:
	}
}

// readLoop is the connection's reader goroutine: it reads frames and, once the connection
// serves, dispatches each in wire order. Timeouts are applied by the consumers, not through the
// read ctx: cancelling a read ctx closes a WebSocket, and a handshake timeout must still be able
// to send its error event.
func (c *Conn) readLoop() {
	defer close(c.readerDone)
	for {
		f, err := c.readFrame()
		if err != nil {
			c.readErr = err
		}
		select {
		case c.first <- firstFrame{f: f, err: err}:
			if err != nil {
				return
			}
			continue
		case <-c.serving:
		case <-c.ctx.Done():
			return
		}
		if err != nil {
			c.lose(c.readLoss(err))
			return
		}
		if !c.dispatch(f) {
			return
		}
	}
}

func (c *Conn) readFrame() (Frame, error) {
	data, err := c.t.ReadFrame(c.ctx)
	var refused *protocol.Error
	if errors.As(err, &refused) {
		return Frame{Refused: refused}, nil
	}
	return Frame{Data: data}, err
}

// dispatch hands f to the handler and queues its reply; false ends the dispatch (the handler
// failed: what the connection carries has ended; or the reply could not be queued).
func (c *Conn) dispatch(f Frame) bool {
	reply, err := c.handle(c.ctx, f)
	if err != nil {
		return false
	}
	if reply == nil {
		return true
	}
	if err := c.st.Send(*reply); err != nil {
		c.lose(LostSlow)
		return false
	}
	return true
}

// writeLoop is the connection's one writer: the pre frames, then the events the stream numbers
// from the queue. It stops when the queue is closed and drained or failed, when a write fails
// (writeFailed reports why) or when the session moved to another connection (LostReplaced).
func (c *Conn) writeLoop() {
	defer close(c.writerDone)
	for _, data := range c.pre {
		if err := c.writeFrame(data); err != nil {
			c.writeFailed(err)
			return
		}
	}
	c.pre = nil
	for {
		data, done, err := c.st.next(c.q)
		switch {
		case errors.Is(err, errDetached):
			// Detached by a resume (or by its own overflow, which Serve reports).
			if c.ctx.Err() == nil && !errors.Is(c.q.Err(), ErrSlowClient) {
				c.lose(LostReplaced)
			}
			return
		case err != nil:
			c.q.Fail(err)
			c.lose(LostSlow)
			return
		case data != nil:
			if err := c.writeFrame(data); err != nil {
				c.writeFailed(err)
				return
			}
			continue
		case done:
			return // closed and drained, or failed (an overflow is reported by Serve)
		}
		select {
		case <-c.q.notify:
		case <-c.ctx.Done():
			return
		}
	}
}

// writeFrame is the writer's write: it ends with the connection, and Serve's watch takes one
// blocked past WriteTimeout for a client not reading (checkStall).
func (c *Conn) writeFrame(data []byte) error {
	c.writingSince.Store(time.Now().UnixNano())
	err := c.t.WriteFrame(c.ctx, data)
	if err == nil {
		c.writingSince.Store(0)
	}
	return err
}

// writeFailed reports why a write failed. Only a write that timed out says the client stopped
// reading (LostSlow). Any other failure means the connection is closing or broken, and the
// reader knows which: a client that sent a close frame (the close handshake makes every later
// write fail at once) ended the session on purpose and must not be taken for a slow or dropped
// client, whose resumable session would hold its slot for the resume grace.
func (c *Conn) writeFailed(err error) {
	c.q.Fail(fmt.Errorf("writing to the client: %w", err))
	if c.ctx.Err() != nil {
		return
	}
	if errors.Is(err, context.DeadlineExceeded) {
		c.lose(LostSlow)
		return
	}
	timer := time.NewTimer(time.Second) // a reader that has not failed yet: still broken for writing
	defer timer.Stop()
	select {
	case <-c.readerDone:
		if c.readErr != nil {
			c.lose(lossOf(c.readErr))
			return
		}
	case <-timer.C:
	case <-c.ctx.Done():
		return
	}
	c.lose(LostRead)
}

// lossOf classifies a read error: the peer's close ends the session on purpose; anything else
// (EOF, reset, timeout) is a dropped network.
func lossOf(err error) Loss {
	if errors.Is(err, ErrPeerClosed) {
		return LostClosed
	}
	return LostRead
}

// readLoss classifies the read error that ended the reader. A write that times out closes the
// socket, so the read often fails before the writer has reported the timeout: a read failure
// while a write has been blocked for (about) WriteTimeout is the client not reading, not a
// network drop.
func (c *Conn) readLoss(err error) Loss {
	l := lossOf(err)
	if l != LostRead || c.opts.WriteTimeout <= 0 {
		return l
	}
	if since := c.writingSince.Load(); since != 0 && time.Since(time.Unix(0, since)) >= c.opts.WriteTimeout*9/10 {
		return LostSlow
	}
	return l
}
