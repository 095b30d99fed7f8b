package realtime

import (
	"fmt"
	"net/http"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/auth"
	"github.com/omniserve/omniserve/internal/realtime/link"
	"github.com/omniserve/omniserve/internal/realtime/live"
)

// A sideband is a server's WebSocket joined to a live call (GET /v1/realtime?call_id=rtc_…,
// OpenAI's server-side tools pattern): it gets every server event the call's data channel gets
// except audio deltas (the audio is RTP), and its client events act on the call's session. It
// has its own stream and bounded queue, so a slow sideband is closed (1008) as a slow WebSocket
// client is, and never stalls the call; closing it does not end the call; the call ending closes
// it with a close frame.

// WithSideband routes GET /v1/realtime?call_id=… to the call's sideband and every other request
// to next (the WebSocket endpoint).
func (c *Calls) WithSideband(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("call_id") {
			c.Sideband(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Sideband serves GET /v1/realtime?call_id=rtc_…. Only the server's API key opens one: an ek_
// client secret is the browser's key for its own call, and must not let a page listen in on or
// steer another call (OpenAI's sideband, too, is opened with the standard key).
func (c *Calls) Sideband(w http.ResponseWriter, r *http.Request) {
	sec, res := c.h.cfg.Secrets.Check(r, c.h.cfg.APIKey)
	if res != auth.OK {
		callError(w, http.StatusUnauthorized, "invalid_api_key", "", "missing or invalid API key")
		return
	}
	if sec != nil {
		callError(w, http.StatusUnauthorized, "invalid_api_key", "",
			"a client secret (ek_) cannot open a sideband connection; use the server's API key")
		return
	}
	id := r.URL.Query().Get("call_id")
	cl := c.joinSideband(func() *call { return c.calls[id] })
	if cl == nil {
		callError(w, http.StatusNotFound, "call_not_found", "call_id", fmt.Sprintf("no live call %q", id))
		return
	}
	defer c.finished()
	if !cl.waitReady() {
		callError(w, http.StatusNotFound, "call_not_found", "call_id", fmt.Sprintf("no live call %q", id))
		return
	}
	c.serveSideband(w, r, cl, isBeta(r), zap.String("call_id", id))
}

// serveSideband upgrades the request and runs it as a sideband of cl until one of them ends;
// idField names the call in the sideband's log.
func (c *Calls) serveSideband(w http.ResponseWriter, r *http.Request, cl *call, beta bool, idField zap.Field) {
	limitSendBuffer(r.Context())
	ws := c.h.accept(w, r, beta)
	if ws == nil {
		return
	}
	sb := c.h.newConn(ws, link.NewStream(beta, nil), link.NewQueue(c.h.cfg.SendQueue, c.h.cfg.SendQueueBytes, false),
		c.h.log.With(idField, zap.String("sideband", "websocket")))
	sb.st.Attach(sb.q, 0)
	if !cl.join(sb) {
		sb.close(websocket.StatusNormalClosure, "call ended")
		return
	}
	sb.log.Debug("sideband joined")
	sb.serveSideband(cl)
}

// join adds sb to the call's sidebands; false when the call's session has already ended. A
// Live call's new sideband gets the replay first (livereplay.go), in the same hold of the
// sidebands' lock as its joining, so that no event is missed or sent twice between the replay
// and the live ones; at most half its queue, the newest, so that the replay alone never makes
// it too slow.
func (cl *call) join(sb *wsConn) bool {
	tr := cl.liveOf()
	var now int64
	if tr != nil {
		now = live.TimelineMs(tr)
	}
	cl.sbs.mu.Lock()
	defer cl.sbs.mu.Unlock()
	if cl.sbs.ended {
		return false
	}
	if tr != nil {
		evs := cl.sbs.replay.since(now)
		evs = evs[max(0, len(evs)-cl.h.cfg.SendQueue/2):]
		for _, ev := range evs {
			_ = sb.st.Send(ev) // a failed queue closes the sideband as slow (its queue watcher)
		}
	}
	cl.sbs.set[sb] = struct{}{}
	return true
}

func (cl *call) leave(sb *wsConn) {
	cl.sbs.mu.Lock()
	delete(cl.sbs.set, sb)
	cl.sbs.mu.Unlock()
}

// toSidebands queues ev for every sideband. One whose queue refuses it (overflow: a slow
// sideband) leaves the call; its queue watcher closes it. A Live call's event gets its event_id
// here, one for all its sidebands, and is kept for the replay (but the reflected audio).
func (cl *call) toSidebands(ev link.Event) {
	tr := cl.liveOf()
	replays := tr != nil && !live.SidebandOnly(ev.Type)
	var now int64
	if replays {
		now = live.TimelineMs(tr)
	}
	cl.sbs.mu.Lock()
	defer cl.sbs.mu.Unlock()
	if replays {
		ev.EventID = link.NewEventID()
		cl.sbs.replay.add(ev, now)
	}
	for sb := range cl.sbs.set {
		if err := sb.st.Send(ev); err != nil {
			delete(cl.sbs.set, sb)
		}
	}
}

// endSidebands tells every sideband that the session has ended (what it said last is queued).
func (cl *call) endSidebands() {
	cl.sbs.mu.Lock()
	defer cl.sbs.mu.Unlock()
	if !cl.sbs.ended {
		cl.sbs.ended = true
		close(cl.sbs.done)
	}
}

// serveSideband runs a sideband until the call ends (close frame 1000 after what is queued) or
// the connection goes (the call goes on). Its client events go to the call's session in wire
// order; a bad one gets its error event on the sideband.
func (c *wsConn) serveSideband(cl *call) {
	loss := c.core.Serve(c.st, nil, replyWith(nil, errorEventIn(sinkOf(cl.sess).dialect()), cl.apply), cl.sbs.done)
	code, text := websocket.StatusNormalClosure, "call ended"
	if loss != link.Ended {
		cl.leave(c)
		switch loss {
		case link.LostSlow:
			c.log.Warn("sideband is not reading; closing it (1008), the call goes on", zap.Error(c.q.Err()))
			code, text = websocket.StatusPolicyViolation, "connection too slow"
		case link.LostClosed:
			text = "sideband closed"
		default:
			code = 0
		}
	}
	c.close(code, text)
	c.log.Debug("sideband ended")
}

// joinSideband finds, under the calls' lock, the call a sideband attaches to (find; nil: none)
// and counts the sideband, so that Close waits for it too. nil: no such call, or the server is
// closing.
func (c *Calls) joinSideband(find func() *call) *call {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := find()
	if cl == nil || c.closed {
		return nil
	}
	c.startedLocked()
	return cl
}
