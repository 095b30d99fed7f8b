package realtime

import (
	"context"
	"errors"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/link"
	"github.com/omniserve/omniserve/internal/realtime/vllm"
	"github.com/omniserve/omniserve/internal/session"
)

// wsConn is one WebSocket connection (a session's, or a call's sideband) over the connection
// core: the core reads frames and hands them to the session in wire order, and writes what the
// session's stream has queued for it. The session (its actor, owned by the handler that created
// it) may outlive the connection.
type wsConn struct {
	h    *handler
	core *link.Conn
	st   *link.Stream
	q    *link.Queue
	log  *zap.Logger
	// pre are frames written before anything queued: session.resumed and the replay.
	pre [][]byte
}

// newConn starts the core's reader of ws; the stream and queue may be attached to a session
// later.
func (h *handler) newConn(ws *websocket.Conn, st *link.Stream, q *link.Queue, log *zap.Logger) *wsConn {
	core := link.New(h.cfg.BaseContext, wsTransport{ws: ws, maxEvent: h.cfg.MaxEventBytes}, q, link.Options{
		WriteTimeout: h.cfg.WriteTimeout, StallTimeout: h.cfg.StallTimeout, OnStall: h.cfg.OnStall,
		DrainTimeout: h.cfg.WriteTimeout, SlowCloseWait: slowCloseWait, Log: log})
	return &wsConn{h: h, core: core, st: st, q: q, log: log}
}

// slowCloseWait is how long a client found not reading has, after its session let it go, to
// read what was in flight and the close frame (1008 and why): a client that was only paused
// (a debugger, a GC pause, a suspended laptop) learns why it was closed, not just that the
// socket is gone. The slot is already free; only the socket waits.
const slowCloseWait = 10 * time.Second

// close ends the connection with code (0: at once, no close frame), after what is queued.
func (c *wsConn) close(code websocket.StatusCode, reason string) { c.core.Close(int(code), reason) }

// refuse writes ev on a connection that carries no session and closes it. numbered gives the
// event server_event_seq 1 of the connection's own stream; a resume handshake reply has none
// (it is not part of any session's stream).
func (c *wsConn) refuse(ev link.Event, code websocket.StatusCode, reason string, numbered bool) {
	var data []byte
	var err error
	if numbered {
		data, err = c.st.Stamp(ev)
	} else {
		data, err = link.EncodeUnnumbered(ev)
	}
	if err != nil {
		data = nil
	}
	c.core.Refuse(data, int(code), reason)
}

// serve runs the connection for sess (attachment gen) until the session ends or the connection
// is lost. A lost connection of a resumable session detaches it (the session goes on for its
// resume grace); otherwise the session ends with it, as without resume.
func (c *wsConn) serve(sess *session.Session, gen int) {
	loss := c.core.Serve(c.st, c.pre, c.dispatch(sess), sess.Done())
	c.pre = nil
	if loss == link.Ended {
		if reason := sess.CloseReason(); reason == session.ReasonSlowClient && c.queueSlow() {
			// The session saw its queue refuse an event (overflow or write timeout) and ended
			// before the connection did: the close is logged all the same. (A queue failed by a
			// closing connection also ends the session this way, but that client is not slow.)
			c.logSlow(sess)
		}
		c.close(closeCode(sess.CloseReason()))
		return
	}
	if loss == link.LostSlow {
		// A client that stops reading is closed now (1008), not when the session next has
		// something to say: its slot goes back (or its resume grace starts) within WriteTimeout.
		c.logSlow(sess)
	}
	switch {
	case loss == link.LostReplaced:
		c.replaced(sess, gen)
	case loss != link.LostClosed && resumable(sess):
		c.st.Detach(c.q)
		sess.Disconnected(gen)
		if loss == link.LostSlow {
			c.close(websocket.StatusPolicyViolation, "connection too slow")
		} else {
			c.close(0, "")
		}
	default:
		sess.Stop(lossReason(loss))
		c.close(closeCode(sess.CloseReason()))
	}
}

// replaced closes a connection whose session a resume moved to another one (1008). A client of
// vllm-omni's dialect is told first, as vllm-omni tells it: session.replaced {session_id,
// attachment_generation} (this connection's: 1 for the session's first, +1 per resume),
// unnumbered, and the close's reason is session_replaced.
func (c *wsConn) replaced(sess *session.Session, gen int) {
	if sinkOf(sess).dialect().Name() != vllm.Name {
		c.close(websocket.StatusPolicyViolation, "session resumed on another connection")
		return
	}
	data, err := link.EncodeUnnumbered(link.Event{Type: "session.replaced",
		Fields: map[string]any{"session_id": sess.ID(), "attachment_generation": gen + 1}})
	if err != nil {
		data = nil // plain values: cannot happen
	}
	c.core.Refuse(data, int(websocket.StatusPolicyViolation), "session_replaced")
}

// queueSlow reports whether the connection's queue failed because the client did not read.
func (c *wsConn) queueSlow() bool {
	qerr := c.q.Err()
	return errors.Is(qerr, link.ErrSlowClient) || errors.Is(qerr, context.DeadlineExceeded)
}

func (c *wsConn) logSlow(sess *session.Session) {
	c.log.Warn("realtime client is not reading; closing the connection (1008)",
		zap.String("session_id", sess.ID()), zap.Duration("write_timeout", c.h.cfg.WriteTimeout), zap.Error(c.q.Err()))
}

// lossReason is the session's close reason for a connection lost without resume.
func lossReason(loss link.Loss) string {
	switch loss {
	case link.LostSlow:
		return session.ReasonSlowClient
	case link.LostClosed:
		// A close frame is the client's decision, as session.close is: logged as such, not as
		// a network drop.
		return session.ReasonClientClose
	}
	return session.ReasonDisconnect
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
	case ReasonInvalidEvents:
		return invalidEventsClose, invalidEventsReason
	}
	return websocket.StatusNormalClosure, reason
}

// dispatch decodes the session's frames in its dialect and hands the commands to it in wire
// order. Acknowledgements stay here: they trim the stream's journal and are never answered.
func (c *wsConn) dispatch(sess *session.Session) link.Handler {
	sink := sinkOf(sess)
	d, guard := sink.dialect(), sink.guard
	return replyWith(guard, errorEventIn(d), func(ctx context.Context, data []byte) (*WireError, error) {
		cmd, werr := d.Decode(data)
		if werr != nil {
			return werr, nil
		}
		switch cmd := cmd.(type) {
		case *EventAck:
			c.ack(cmd, guard)
			return nil, nil
		case *ResumeSession:
			return &WireError{Code: "invalid_request_error", Param: "type", EventID: cmd.EventID(),
				Message: "session.resume is only valid as the first event of a connection opened with ?session_id=<id>"}, nil
		case selfAnswered:
			return nil, answerSelf(ctx, sess, sink, cmd)
		}
		return nil, sess.Submit(ctx, cmd)
	})
}

// selfAnswered is a command its dialect answers itself, in whole or in part (Live: its acks
// on the timeline, mute, session.update): its events go to the client at once, then its
// commands to the session, in order.
type selfAnswered interface {
	Answer() ([]protocol.ServerEvent, []session.Command)
}

// answerSelf sends cmd's own events on the session's outbound and submits its commands.
func answerSelf(ctx context.Context, sess *session.Session, sink *sessionSink, cmd selfAnswered) error {
	evs, cmds := cmd.Answer()
	for _, ev := range evs {
		if err := sink.out.Send(link.Event{Type: ev.EventType(), Payload: ev}); err != nil {
			return err
		}
	}
	for _, c := range cmds {
		if err := sess.Submit(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// resumable reports whether sess outlives a lost connection: a resumable server's session,
// unless its dialect has no resume (Live: a new socket is a new session).
func resumable(sess *session.Session) bool {
	if r, ok := sinkOf(sess).dialect().(interface{ Resumable() bool }); ok && !r.Resumable() {
		return false
	}
	return sess.Resumable()
}

// errorSpeller is a dialect with an error event of its own shape (Live's).
type errorSpeller interface {
	ErrorEvent(e *WireError) protocol.ServerEvent
}

// errorEventIn is how dialect d writes the connection's error events.
func errorEventIn(d dialect) func(*WireError) link.Event {
	s, ok := d.(errorSpeller)
	if !ok {
		return errorEvent
	}
	return func(e *WireError) link.Event {
		p := s.ErrorEvent(e)
		return link.Event{Type: p.EventType(), Payload: p}
	}
}

// ack applies session.event_ack: the journal drops what the client received. An invalid ack
// (no integer, negative, beyond the newest event) is counted and spends the invalid-event
// budget, but is never answered: the answer would be numbered, acked, and answered again.
func (c *wsConn) ack(a *EventAck, guard *floodGuard) {
	if a.Problem == "" && c.st.Ack(a.Seq) == nil {
		return
	}
	c.log.Debug("invalid session.event_ack ignored", zap.Int64("server_event_seq", a.Seq), zap.String("problem", a.Problem))
	guard.admit("invalid_event_ack")
}

// errInvalidEvents ends the dispatch of a connection whose client spent its invalid-event
// budget: the session is ending (ReasonInvalidEvents), and nothing more is read.
var errInvalidEvents = errors.New("too many invalid events")

// replyWith is the core's handler over apply: a frame that could not be read as an event, or
// that apply refuses, gets its error event on the connection while guard admits it; apply's
// error (the session has ended) ends the dispatch, and the session's end closes the
// connection. Once the guard's budget is spent nothing more is read.
func replyWith(guard *floodGuard, spell func(*WireError) link.Event, apply func(ctx context.Context, data []byte) (*WireError, error)) link.Handler {
	return func(ctx context.Context, f link.Frame) (*link.Event, error) {
		if guard.spent() {
			return nil, errInvalidEvents
		}
		werr := f.Refused
		if werr == nil {
			var err error
			if werr, err = apply(ctx, f.Data); err != nil {
				return nil, err
			}
		}
		if werr == nil {
			return nil, nil
		}
		if !guard.admit(werr.Code) {
			return nil, errInvalidEvents
		}
		ev := spell(werr)
		return &ev, nil
	}
}

// runSession starts sess's actor on its own goroutine, owned by the transport that created the
// session (the WebSocket handler, or a call's run): it waits for the returned channel, which is
// closed once Run has returned. first, when not nil, is the client's first session.update, which
// opens the session (a client that speaks first); ended, when not nil, runs as Run returns (the
// WebSocket handler's slot release: the slot is not held while a slow client's socket closes).
func runSession(ctx context.Context, sess *session.Session, first *session.UpdateSession, ended func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		sess.Run(ctx, first)
		if ended != nil {
			ended()
		}
	}()
	return done
}
