package realtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// conn is one WebSocket connection: a reader goroutine reads frames, a dispatcher hands them to
// the session in wire order, a writer writes what the session's stream has queued for it. The
// session (its actor, owned by the handler that created it) may outlive the connection.
type conn struct {
	h   *handler
	ws  *websocket.Conn
	st  *stream
	q   *outQueue
	log *zap.Logger
	// pre are frames written before anything queued: session.resumed and the replay.
	pre [][]byte

	ctx        context.Context // ends when the connection is finished
	cancel     context.CancelFunc
	frames     chan frame
	readerDone chan struct{}
	readErr    error // what ended the reader; read after readerDone is closed
	// writingSince is when the write in flight began (unix ns; 0 when none is). It is left set
	// after a failed write: a write that timed out closes the socket, and the reader, failing
	// next, must still learn that the client stopped reading rather than dropped.
	writingSince atomic.Int64
}

// loss is why a connection ended before its session.
type loss int

const (
	lostRead     loss = iota // the read failed without a close frame: the network dropped
	lostClosed               // the client sent a close frame: it ended the session on purpose
	lostSlow                 // a write failed (timeout: the client stopped reading, or the network)
	lostReplaced             // a resume moved the session to another connection
)

// newConn starts the reader of ws; the stream and queue may be attached to a session later.
func (h *handler) newConn(ws *websocket.Conn, st *stream, q *outQueue) *conn {
	ctx, cancel := context.WithCancel(h.cfg.BaseContext)
	c := &conn{h: h, ws: ws, st: st, q: q, log: h.log, ctx: ctx, cancel: cancel,
		frames: make(chan frame), readerDone: make(chan struct{})}
	go func() { defer close(c.readerDone); c.readFrames(ctx) }()
	return c
}

// closeWS ends the connection with code (0: at once, no close frame) and waits for the reader.
func (c *conn) closeWS(code websocket.StatusCode, reason string) {
	if code == 0 {
		_ = c.ws.CloseNow()
	} else {
		done := make(chan struct{})
		go func() { defer close(done); _ = c.ws.Close(code, reason) }()
		select {
		case <-done:
		case <-time.After(time.Second):
			_ = c.ws.CloseNow()
			<-done
		}
	}
	c.cancel()
	<-c.readerDone
}

// refuse writes ev on a connection that carries no session and closes it. numbered gives the
// event server_event_seq 1 of the connection's own stream; a resume handshake reply has none
// (it is not part of any session's stream).
func (c *conn) refuse(sev session.Event, code websocket.StatusCode, reason string, numbered bool) {
	var data []byte
	var err error
	ev, _ := outbound(sev)
	if numbered {
		c.st.mu.Lock()
		data, err = c.st.stampLocked(ev)
		c.st.mu.Unlock()
	} else {
		data, err = c.st.encodeUnnumbered(ev)
	}
	if err == nil && data != nil {
		wctx, cancel := context.WithTimeout(c.ctx, c.h.cfg.WriteTimeout)
		_ = c.ws.Write(wctx, websocket.MessageText, data)
		cancel()
	}
	c.closeWS(code, reason)
}

// serve runs the connection for sess (attachment gen) until the session ends or the connection
// is lost. A lost connection of a resumable session detaches it (the session goes on for its
// resume grace); otherwise the session ends with it, as without resume.
func (c *conn) serve(sess *session.Session, gen int) {
	lost := make(chan loss, 3)
	var wg sync.WaitGroup
	writerDone := make(chan struct{})
	wg.Add(3)
	go func() { defer wg.Done(); defer close(writerDone); c.writeLoop(lost) }()
	go func() { defer wg.Done(); c.dispatch(sess, lost) }()
	go func() { defer wg.Done(); c.watchQueue(lost) }()
	finish := func(code websocket.StatusCode, reason string) {
		c.q.close()
		if code != 0 {
			// What is queued (session.closed) goes out before the close frame.
			select {
			case <-writerDone:
			case <-time.After(c.h.cfg.WriteTimeout):
			}
		}
		c.closeWS(code, reason)
		wg.Wait()
	}
	logSlow := func() {
		c.log.Warn("realtime client is not reading; closing the connection (1008)",
			zap.String("session_id", sess.ID()), zap.Duration("write_timeout", c.h.cfg.WriteTimeout), zap.Error(c.q.err()))
	}
	select {
	case <-sess.Done():
		reason := sess.CloseReason()
		if qerr := c.q.err(); reason == session.ReasonSlowClient && (errors.Is(qerr, ErrSlowClient) || errors.Is(qerr, context.DeadlineExceeded)) {
			// The session saw its queue refuse an event (overflow or write timeout) and ended
			// before the connection did: the close is logged all the same. (A queue failed by a
			// closing connection also ends the session this way, but that client is not slow.)
			logSlow()
		}
		code, text := closeCode(reason)
		finish(code, text)
		return
	case cause := <-lost:
		if cause == lostSlow {
			// A client that stops reading is closed now (1008), not when the session next has
			// something to say: its slot goes back (or its resume grace starts) within WriteTimeout.
			logSlow()
		}
		switch {
		case cause == lostReplaced:
			finish(websocket.StatusPolicyViolation, "session resumed on another connection")
		case cause != lostClosed && sess.Resumable():
			c.st.detach(c.q)
			sess.Disconnected(gen)
			if cause == lostSlow {
				finish(websocket.StatusPolicyViolation, "connection too slow")
			} else {
				finish(0, "")
			}
		default:
			reason := session.ReasonDisconnect
			switch cause {
			case lostSlow:
				reason = session.ReasonSlowClient
			case lostClosed:
				// A close frame is the client's decision, as session.close is: logged as such,
				// not as a network drop.
				reason = session.ReasonClientClose
			}
			sess.Stop(reason)
			code, text := closeCode(sess.CloseReason())
			finish(code, text)
		}
	}
}

// watchQueue reports the failure of the connection's queue: an overflow is known at once, not
// when the writer (maybe blocked in a write) next looks at the queue.
//
// It also finds a client that stopped reading by age: when the oldest undelivered event has
// waited longer than StallTimeout the queue fails as too slow, whatever the buffer sizes.
func (c *conn) watchQueue(lost chan<- loss) {
	tick := time.NewTicker(max(c.h.cfg.StallTimeout/10, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if age := c.q.headAge(time.Now()); age > c.h.cfg.StallTimeout {
				c.log.Warn("realtime client is not reading: an event waited past the stall timeout",
					zap.Duration("age", age), zap.Duration("stall_timeout", c.h.cfg.StallTimeout))
				if c.h.cfg.OnStall != nil {
					c.h.cfg.OnStall()
				}
				c.q.fail(ErrStalled)
			}
			continue
		case <-c.q.failedC():
			// A failed write is reported by the writer (writeFailed), which knows why it failed.
			switch err := c.q.err(); {
			case errors.Is(err, errDetached):
				signal(lost, lostReplaced)
			case errors.Is(err, ErrSlowClient):
				signal(lost, lostSlow)
			}
		case <-c.ctx.Done():
		}
		return
	}
}

// closeCode maps a session's close reason to the WebSocket close.
func closeCode(reason string) (websocket.StatusCode, string) {
	switch reason {
	case session.ReasonDisconnect, session.ReasonResumeExpired:
		return 0, ""
	case session.ReasonSlowClient:
		return websocket.StatusPolicyViolation, "connection too slow"
	case session.ReasonShutdown:
		return websocket.StatusGoingAway, "server shutting down"
	case session.ReasonInternalError:
		return websocket.StatusInternalError, "internal error"
	}
	return websocket.StatusNormalClosure, reason
}

func signal(lost chan<- loss, l loss) {
	select {
	case lost <- l:
	default:
	}
}

// readEvent reads one frame, bounded by MaxEventBytes; an oversized frame is discarded and
// reported, and the connection stays usable.
func (c *conn) readEvent(ctx context.Context) ([]byte, *WireError, error) {
	typ, r, err := c.ws.Reader(ctx)
	if err != nil {
		return nil, nil, err
	}
	max := c.h.cfg.MaxEventBytes
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, nil, err
	}
	if int64(len(data)) > max {
		if _, err := io.Copy(io.Discard, r); err != nil {
			return nil, nil, err
		}
		return nil, &WireError{Code: "event_too_large", Param: "", Message: fmt.Sprintf("the event exceeds %d bytes", max)}, nil
	}
	if typ != websocket.MessageText {
		return nil, &WireError{Code: "invalid_json", Message: "events must be JSON text frames"}, nil
	}
	return data, nil, nil
}

// frame is one inbound frame, or the read error that ended the connection.
type frame struct {
	data []byte
	werr *WireError
	err  error
}

// readFrames is the connection's reader goroutine. Timeouts are applied by the consumers, not
// through the read ctx: cancelling a read ctx closes a coder/websocket connection, and a
// handshake timeout must still be able to send its error event.
func (c *conn) readFrames(ctx context.Context) {
	for {
		data, werr, err := c.readEvent(ctx)
		if err != nil {
			c.readErr = err
		}
		select {
		case c.frames <- frame{data: data, werr: werr, err: err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// lossOf classifies a read error: a close frame from the client ends the session on purpose;
// anything else (EOF, reset, timeout) is a dropped network.
func lossOf(err error) loss {
	if websocket.CloseStatus(err) != -1 {
		return lostClosed
	}
	return lostRead
}

// dispatch decodes frames and hands commands to the session in wire order.
func (c *conn) dispatch(sess *session.Session, lost chan<- loss) {
	c.dispatchFrames(lost, func(data []byte) (*WireError, error) {
		cmd, werr := DecodeClientEvent(data)
		if werr != nil {
			return werr, nil
		}
		if _, ok := cmd.(*ResumeSession); ok {
			return &WireError{Code: "invalid_request_error", Param: "type", EventID: cmd.EventID(),
				Message: "session.resume is only valid as the first event of a connection opened with ?session_id=<id>"}, nil
		}
		return nil, sess.Submit(c.ctx, cmd)
	})
}

// dispatchFrames hands the connection's frames, in wire order, to handle. A frame that could not
// be read as an event, or that handle refuses, gets its error event on this connection. It
// returns when the connection is lost (reported on lost), or when handle fails: the session has
// ended, and its end closes the connection.
func (c *conn) dispatchFrames(lost chan<- loss, handle func(data []byte) (*WireError, error)) {
	for {
		var f frame
		select {
		case f = <-c.frames:
		case <-c.ctx.Done():
			return
		}
		if f.err != nil {
			signal(lost, c.readLoss(f.err))
			return
		}
		werr := f.werr
		if werr == nil {
			var err error
			if werr, err = handle(f.data); err != nil {
				return
			}
		}
		if werr == nil {
			continue
		}
		if err := c.st.Send(errorEvent(werr)); err != nil {
			signal(lost, lostSlow)
			return
		}
	}
}

// writeLoop writes the pre frames, then the session's events as its stream numbers them. It
// stops when the queue is closed and drained or failed, when a write fails (writeFailed reports
// why) or when the session moved to another connection (lostReplaced).
func (c *conn) writeLoop(lost chan<- loss) {
	for _, data := range c.pre {
		if err := c.writeFrame(data); err != nil {
			c.writeFailed(err, lost)
			return
		}
	}
	c.pre = nil
	for {
		data, done, err := c.st.next(c.q)
		switch {
		case errors.Is(err, errDetached):
			// Detached by a resume (or by its own overflow, which watchQueue reports).
			if c.ctx.Err() == nil && !errors.Is(c.q.err(), ErrSlowClient) {
				signal(lost, lostReplaced)
			}
			return
		case err != nil:
			c.q.fail(err)
			signal(lost, lostSlow)
			return
		case data != nil:
			if err := c.writeFrame(data); err != nil {
				c.writeFailed(err, lost)
				return
			}
			continue
		case done:
			return // closed and drained, or failed (an overflow is reported by watchQueue)
		}
		select {
		case <-c.q.notify:
		case <-c.ctx.Done():
			return
		}
	}
}

// writeFailed reports why a write failed. Only a write that timed out says the client stopped
// reading (lostSlow). Any other failure means the connection is closing or broken, and the
// reader knows which: a client that sent a close frame (the close handshake makes every later
// write fail at once) ended the session on purpose and must not be taken for a slow or dropped
// client, whose resumable session would hold its slot for the resume grace.
func (c *conn) writeFailed(err error, lost chan<- loss) {
	c.q.fail(fmt.Errorf("writing to the client: %w", err))
	if c.ctx.Err() != nil {
		return
	}
	if errors.Is(err, context.DeadlineExceeded) {
		signal(lost, lostSlow)
		return
	}
	select {
	case <-c.readerDone:
		if c.readErr != nil {
			signal(lost, lossOf(c.readErr))
			return
		}
	case <-time.After(time.Second):
		// A reader that has not failed yet: the connection is still broken for writing.
	case <-c.ctx.Done():
		return
	}
	signal(lost, lostRead)
}

func (c *conn) writeFrame(data []byte) error {
	wctx, cancel := context.WithTimeout(c.ctx, c.h.cfg.WriteTimeout)
	defer cancel()
	c.writingSince.Store(time.Now().UnixNano())
	err := c.ws.Write(wctx, websocket.MessageText, data)
	if err == nil {
		c.writingSince.Store(0)
	}
	return err
}

// readLoss classifies the read error that ended the reader. A write that times out closes the
// socket, so the read often fails before the writer has reported the timeout: a read failure
// while a write has been blocked for (about) WriteTimeout is the client not reading, not a
// network drop.
func (c *conn) readLoss(err error) loss {
	l := lossOf(err)
	if l != lostRead {
		return l
	}
	if since := c.writingSince.Load(); since != 0 && time.Since(time.Unix(0, since)) >= c.h.cfg.WriteTimeout*9/10 {
		return lostSlow
	}
	return l
}

// encodeUnnumbered encodes ev with an event_id and without server_event_seq, in the stream's
// dialect.
func (s *stream) encodeUnnumbered(ev outEvent) ([]byte, error) {
	return encodeEvent(ev, protocol.Envelope{Type: eventType(ev), EventID: newEventID()})
}
