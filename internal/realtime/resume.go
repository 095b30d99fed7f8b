package realtime

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/link"
	"github.com/omniserve/omniserve/internal/session"
)

// Resume over HTTP headers (clients that can set them; browsers send session.resume instead).
const (
	// ResumeTokenHeader carries the resume token on a resume connection.
	ResumeTokenHeader = "Omniserve-Resume-Token"
	// LastSeqHeader carries the last server_event_seq the client received (0: none).
	LastSeqHeader = "Omniserve-Last-Event-Seq"
	// SessionIDHeader names the session on the 101 response of a new session, so that a
	// balancer can route its resume (?session_id=) to the same replica.
	SessionIDHeader = "Omniserve-Session-Id"
)

type resumeReq struct {
	eventID   string
	sessionID string
	token     string
	lastSeq   int64
	// gapEvent answers a cursor the journal no longer covers with vllm-omni's
	// session.resync_required (its clients' same-URL resume), not session.resumed's flag.
	gapEvent bool
}

// serveResume runs a connection opened with ?session_id=: its first event is session.resume
// (or the token and seq come as headers). A refused resume gets one error event and the
// connection closes (1008); the session it named is not touched.
func (h *handler) serveResume(w http.ResponseWriter, r *http.Request) {
	beta := isBeta(r)
	ws := h.accept(w, r, beta)
	if ws == nil {
		return
	}
	// No stream for the handshake (its replies are unnumbered); a resume attaches the session's.
	c := h.newConn(ws, nil, link.NewQueue(h.cfg.SendQueue, h.cfg.SendQueueBytes, true), h.log)
	req, werr, gone := c.resumeRequest(r)
	if gone {
		c.close(0, "")
		return
	}
	if werr != nil {
		c.refuseResume(werr)
		return
	}
	h.resume(c, req, func(code string) string { return code })
}

// resume moves the session req names to connection c (whose queue no session holds yet) and
// serves it there until it ends or the connection is lost. A refused resume gets one error
// event, its code as code spells it (the dialect's), and the connection closes (1008).
func (h *handler) resume(c *wsConn, req resumeReq, code func(string) string) {
	refuse := func(werr *WireError) {
		werr.Code = code(werr.Code)
		c.refuseResume(werr)
	}
	log := h.log.With(zap.String("session_id", req.sessionID))
	sess := h.sessions.Lookup(req.sessionID)
	var st *link.Stream
	if sess != nil {
		st = streamOf(sess.Sink())
	}
	if st == nil {
		log.Debug("session resume refused: no such session")
		refuse(notFound(req))
		return
	}
	q := c.q
	var replay [][]byte
	var last int64
	ctx, cancel := context.WithTimeout(c.core.Context(), h.cfg.HandshakeTimeout)
	res, err := sess.Resume(ctx, session.ResumeRequest{Token: req.token, Attach: func() bool {
		var complete bool
		replay, complete = st.Attach(q, req.lastSeq)
		last = st.LastSeq()
		return complete
	}})
	cancel()
	if err != nil {
		switch {
		case errors.Is(err, session.ErrSessionGone):
			refuse(notFound(req))
		case errors.Is(err, session.ErrResumeToken):
			refuse(&WireError{Code: "invalid_resume_token", Param: "resume_token", EventID: req.eventID,
				Message: "the resume token is not this session's current token (each resume rotates it: use the token of the last session.resumed)"})
		default:
			refuse(&WireError{Code: "session_resume_failed", EventID: req.eventID, Message: fmt.Sprintf("resuming the session: %v", err)})
		}
		return
	}
	c.st = st
	if res.Resync && req.gapEvent {
		c.resyncRequired(sess, res.Gen)
		return
	}
	ev, _ := sinkOf(sess).outEvent(res.Event)
	if res.Resync {
		replay = nil
	}
	ev.Payload = resumedNumbers(ev.Payload, req.lastSeq, last, len(replay))
	resumed, err := link.EncodeUnnumbered(ev)
	if err != nil {
		// Cannot happen (plain values); the session stays attached and this connection ends.
		log.Error("encoding session.resumed", zap.Error(err))
	}
	c.pre = append([][]byte{resumed}, replay...)
	log.Info("session resumed on a new connection", zap.Int64("last_received_seq", req.lastSeq),
		zap.Int64("last_seq", last), zap.Int("replayed_events", len(replay)), zap.Bool("resync_required", res.Resync))
	c.serve(sess, res.Gen)
}

// resyncRequired answers a same-URL resume (vllm-omni's) whose cursor the journal no longer
// covers as vllm-omni does: session.resync_required {session_id, reason: "journal_gap"}
// (unnumbered) and close 1008. Its clients stop retrying on it and start anew (a ?session_id=
// resume gets session.resumed {resync_required: true} and the conversation instead); the
// session is detached again, so its resume grace ends it.
func (c *wsConn) resyncRequired(sess *session.Session, gen int) {
	c.st.Detach(c.q)
	sess.Disconnected(gen)
	data, err := link.EncodeUnnumbered(link.Event{Type: "session.resync_required",
		Fields: map[string]any{"session_id": sess.ID(), "reason": "journal_gap"}})
	if err != nil {
		data = nil // plain values: cannot happen
	}
	c.core.Refuse(data, int(websocket.StatusPolicyViolation), "session_resync_required")
}

func notFound(req resumeReq) *WireError {
	return &WireError{Code: "session_not_found", Param: "session_id", EventID: req.eventID,
		Message: fmt.Sprintf("no session %q on this server: it ended, its resume grace expired, or it lives on another replica (sessions are not shared)", req.sessionID)}
}

// refuseResume answers a refused resume; the handshake reply has no server_event_seq.
func (c *wsConn) refuseResume(werr *WireError) {
	c.refuse(errorEvent(werr), websocket.StatusPolicyViolation, "session resume refused", false)
}

// resumeRequest reads the resume request: the headers when the token is there, else the first
// event, which must be session.resume. gone is true when the client left during the handshake.
func (c *wsConn) resumeRequest(r *http.Request) (req resumeReq, werr *WireError, gone bool) {
	req.sessionID = r.URL.Query().Get("session_id")
	if tok := r.Header.Get(ResumeTokenHeader); tok != "" {
		req.token = tok
		if req.sessionID == "" {
			return req, &WireError{Code: "missing_required_parameter", Param: "session_id",
				Message: "missing required query parameter 'session_id' (a resume names its session in the URL, which the balancer routes by)"}, false
		}
		v := r.Header.Get(LastSeqHeader)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return req, &WireError{Code: "invalid_value", Param: "last_received_server_event_seq",
				Message: fmt.Sprintf("header %s must be an integer >= 0 (0 when no event was received), got %q", LastSeqHeader, v)}, false
		}
		req.lastSeq = n
		return req, nil, false
	}
	f, err := c.core.First(c.h.cfg.HandshakeTimeout)
	switch {
	case errors.Is(err, link.ErrFirstTimeout):
		return req, &WireError{Code: "session_resume_timeout", Param: "type",
			Message: fmt.Sprintf("no session.resume within %v of connecting with ?session_id=", c.h.cfg.HandshakeTimeout)}, false
	case err != nil:
		return req, nil, true
	case f.Refused != nil:
		return req, f.Refused, false
	}
	cmd, werr := DecodeClientEvent(f.Data)
	if werr != nil {
		return req, werr, false
	}
	rs, ok := cmd.(*ResumeSession)
	if !ok {
		return req, &WireError{Code: "session_resume_required", Param: "type", EventID: cmd.EventID(),
			Message: fmt.Sprintf("a connection opened with ?session_id= must send session.resume first (or the %s header), got %q", ResumeTokenHeader, cmd.Type())}, false
	}
	req.eventID, req.token, req.lastSeq = rs.ID, rs.Token, rs.LastSeq
	if req.sessionID == "" {
		req.sessionID = rs.SessionID
	}
	if rs.SessionID != req.sessionID {
		return req, &WireError{Code: "invalid_value", Param: "session_id", EventID: rs.ID,
			Message: fmt.Sprintf("session.resume names session %q but the URL names %q", rs.SessionID, req.sessionID)}, false
	}
	return req, nil, false
}

// resumedNumbers is session.resumed p with the event numbers the connection knows filled in,
// also inside a dialect's Extended (vllm-omni's adds attachment_generation).
func resumedNumbers(p protocol.ServerEvent, lastReceived, last int64, replayed int) protocol.ServerEvent {
	switch e := p.(type) {
	case protocol.SessionResumed:
		e.LastReceivedServerEventSeq, e.LastServerEventSeq, e.ReplayedEvents = lastReceived, last, replayed
		return e
	case protocol.Extended:
		e.Event = resumedNumbers(e.Event, lastReceived, last, replayed)
		return e
	}
	return p
}
