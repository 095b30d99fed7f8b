package realtime

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/coder/websocket"

	"github.com/omniserve/omniserve/internal/realtime/link"
	"github.com/omniserve/omniserve/internal/realtime/vllm"
	"github.com/omniserve/omniserve/internal/session"
)

// waitsForFirst reports a client that speaks first: vllm-omni's autostart=0 (or resume=1). Such
// a client gets nothing before its first frame, and its first session.update opens the session
// (session.created, then session.updated), as vllm-omni's DuplexClient expects. Every other
// client gets session.created at once, as OpenAI sends it.
func waitsForFirst(q url.Values) bool {
	if q.Has("autostart") {
		switch strings.ToLower(q.Get("autostart")) {
		case "0", "false", "off", "no":
			return true
		}
	}
	return truthy(q.Get("resume"))
}

// speaksFirst runs the handshake of a client that speaks first on c, for sess, which holds slot
// and has not run yet. open is true when sess is to run: first is the client's session.update
// that opens it, pending any other first frame. A first frame that resumes another session on
// this URL takes it over here, and sess never runs (its span ends as "upgrade_failed"; its slot
// goes back at once); a client that left or said nothing in time ends here too.
func (h *handler) speaksFirst(c *wsConn, sess *session.Session, slot *session.Slot) (first *session.UpdateSession, pending *link.Frame, open bool) {
	d := sinkOf(sess).dialect()
	first, pending, ok := c.firstFrame(d)
	if !ok {
		return nil, nil, false
	}
	if rs := h.sameURLResume(d, pending); rs != nil {
		slot.Release()
		h.resume(c, resumeReq{eventID: rs.ID, sessionID: rs.SessionID, token: rs.Token, lastSeq: rs.LastSeq,
			gapEvent: d.Name() == vllm.Name}, d.Code)
		return nil, nil, false
	}
	return first, pending, true
}

// firstFrame waits (HandshakeTimeout) for the first frame of a client that speaks first. first
// is its session.update, which opens the session; pending is any other first frame, handed to
// the session once it runs (dispatchFirst). ok is false when the client left or sent nothing in
// time: it was told (error config_timeout) and the connection is closed.
func (c *wsConn) firstFrame(d dialect) (first *session.UpdateSession, pending *link.Frame, ok bool) {
	f, err := c.core.First(c.h.cfg.HandshakeTimeout)
	switch {
	case errors.Is(err, link.ErrFirstTimeout):
		c.refuse(errorEvent(&WireError{Code: "config_timeout", Param: "type",
			Message: fmt.Sprintf("no event within %v of connecting with autostart=0: send session.update first", c.h.cfg.HandshakeTimeout)}),
			websocket.StatusPolicyViolation, "no session.update in time", false)
		return nil, nil, false
	case err != nil:
		c.close(0, "")
		return nil, nil, false
	}
	if f.Refused == nil {
		if cmd, werr := d.Decode(f.Data); werr == nil {
			if u, isUpdate := cmd.(*session.UpdateSession); isUpdate {
				return u, nil, true
			}
		}
	}
	return nil, &f, true
}

// dispatchFirst hands a client's first frame, when it was not a session.update, to the session
// before it runs: a command waits in its inbox behind session.created, and the error of a frame
// refused is sent right after session.created (sessionSink.afterFirst).
func (c *wsConn) dispatchFirst(sess *session.Session, f link.Frame) {
	reply, err := c.dispatch(sess)(c.core.Context(), f)
	if err == nil && reply != nil {
		sinkOf(sess).afterFirst = reply
	}
}

// sameURLResume is the session.resume a client that speaks first sent as its first frame on the
// URL it first connected to (vllm-omni's DuplexClient reconnects so, without ?session_id=); nil
// for any other first frame, or when sessions are not resumable.
func (h *handler) sameURLResume(d dialect, pending *link.Frame) *ResumeSession {
	if pending == nil || pending.Refused != nil || h.sessions.ResumeGrace() <= 0 {
		return nil
	}
	cmd, werr := d.Decode(pending.Data)
	if werr != nil {
		return nil
	}
	rs, _ := cmd.(*ResumeSession)
	return rs
}
