package talkclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/omniserve/omniserve/internal/protocol"
)

// ErrSessionLost means the connection dropped and the server no longer has the session
// (session_not_found: its resume grace ran out, it was evicted, or the server restarted).
var ErrSessionLost = errors.New("the connection dropped and the server no longer has the session")

// resumeAttempts bounds the redials after a drop; resumeBackoff is the pause before each.
// Together they stay well inside the server's default resume grace (30 s).
const (
	resumeAttempts = 5
	resumeBackoff  = 500 * time.Millisecond
)

// link is the conversation's connection to the server, kept across drops: when the socket is
// lost without a close frame and the server gave the session a resume token, it reconnects
// with omniserve's resume handshake (docs/REALTIME.md, "Resuming a session"), drops the replayed
// events the client already has, and the conversation goes on. Writers made during the drop
// wait for the new socket, so no client event is lost.
type link struct {
	o      Options
	u      string
	hdr    http.Header
	events chan serverEvent

	mu      sync.Mutex
	ws      *websocket.Conn
	swapped chan struct{} // closed when ws is replaced or the link ends
	ended   bool
	// Only the read loop writes these (under mu, as write reads nothing of them).
	sessionID string
	token     string
	lastSeq   int64
	resumes   int
}

func newLink(o Options, u string, hdr http.Header, ws *websocket.Conn) *link {
	return &link{o: o, u: u, hdr: hdr, ws: ws, swapped: make(chan struct{}), events: make(chan serverEvent, 64)}
}

// write sends one frame, waiting out a reconnection if the socket is being replaced.
func (l *link) write(ctx context.Context, b []byte) error {
	for {
		l.mu.Lock()
		ws, swapped, ended := l.ws, l.swapped, l.ended
		l.mu.Unlock()
		err := ws.Write(ctx, websocket.MessageText, b)
		if err == nil || ended || ctx.Err() != nil {
			return err
		}
		select {
		case <-swapped:
		case <-ctx.Done():
			return err
		}
		l.mu.Lock()
		if l.ended && l.ws == ws {
			l.mu.Unlock()
			return err
		}
		l.mu.Unlock()
	}
}

// close ends the link: the read loop stops reconnecting and the socket is closed with code.
func (l *link) close(code websocket.StatusCode, reason string) {
	l.mu.Lock()
	if !l.ended {
		l.ended = true
		close(l.swapped)
	}
	ws := l.ws
	l.mu.Unlock()
	if code != 0 {
		_ = ws.Close(code, reason)
	}
	_ = ws.CloseNow()
}

// readLoop feeds events until the link ends or the connection is lost for good; it closes
// events when it returns.
func (l *link) readLoop(ctx context.Context) error {
	defer close(l.events)
	for {
		l.mu.Lock()
		ws := l.ws
		l.mu.Unlock()
		_, b, err := ws.Read(ctx)
		if err != nil {
			if !l.resumable(ctx, err) {
				return err
			}
			if err := l.resume(ctx); err != nil {
				return err
			}
			continue
		}
		ev, err := decodeEvent(b)
		if err != nil {
			continue
		}
		if seq := ev.env.Seq; seq != 0 {
			if seq <= l.lastSeq {
				continue // replayed, and already handled
			}
			l.lastSeq = seq
		}
		if c, ok := ev.ev.(protocol.SessionCreated); ok {
			switch s := c.Session.(type) {
			case *protocol.Session:
				l.sessionID = s.ID
			case *protocol.TranscriptionSession:
				l.sessionID = s.ID
			}
			l.token = c.ResumeToken
		}
		select {
		case l.events <- ev:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// resumable says whether a read failure is a drop worth a resume: not the client's own close,
// not a close frame from the server (a deliberate end), and only for a session with a token.
func (l *link) resumable(ctx context.Context, err error) bool {
	l.mu.Lock()
	ended := l.ended
	l.mu.Unlock()
	return !ended && ctx.Err() == nil && websocket.CloseStatus(err) == -1 && l.token != "" && l.sessionID != ""
}

// resume redials with the resume handshake and swaps the socket in.
func (l *link) resume(ctx context.Context) error {
	var last error
	for attempt := range resumeAttempts {
		t := time.NewTimer(resumeBackoff * time.Duration(attempt+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
		ws, ev, err := l.dialResume(ctx)
		if err != nil {
			var se *ServerError
			if errors.As(err, &se) {
				if se.Code == "session_not_found" {
					return fmt.Errorf("%w: %s", ErrSessionLost, se.Error())
				}
				return err
			}
			last = err
			continue
		}
		r := ev.ev.(protocol.SessionResumed)
		l.mu.Lock()
		if l.ended {
			l.mu.Unlock()
			_ = ws.CloseNow()
			return errors.New("the conversation ended during a reconnection")
		}
		old := l.ws
		l.ws, l.token = ws, r.ResumeToken
		close(l.swapped)
		l.swapped = make(chan struct{})
		l.resumes++
		l.mu.Unlock()
		_ = old.CloseNow()
		select {
		case l.events <- ev:
		case <-ctx.Done():
			return ctx.Err()
		}
		if r.ResyncRequired {
			// The server's journal no longer holds every event after ours: the reply in flight
			// cannot be followed to its end event by event.
			return errors.New("resumed, but the server could not replay the missed events (resync_required)")
		}
		return nil
	}
	return fmt.Errorf("the connection dropped and %d reconnections failed: %w", resumeAttempts, last)
}

// dialResume opens ?session_id= with the resume headers and reads the answer: session.resumed,
// or the error that refuses the resume.
func (l *link) dialResume(ctx context.Context) (*websocket.Conn, serverEvent, error) {
	u, err := url.Parse(l.u)
	if err != nil {
		return nil, serverEvent{}, err
	}
	q := u.Query()
	q.Set("session_id", l.sessionID)
	u.RawQuery = q.Encode()
	hdr := l.hdr.Clone()
	hdr.Set("Omniserve-Resume-Token", l.token)
	hdr.Set("Omniserve-Last-Event-Seq", strconv.FormatInt(l.lastSeq, 10))
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(dctx, u.String(), &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		return nil, serverEvent{}, dialError(u.String(), resp, err)
	}
	ws.SetReadLimit(64 << 20)
	_, b, err := ws.Read(dctx)
	if err != nil {
		_ = ws.CloseNow()
		return nil, serverEvent{}, fmt.Errorf("reading the resume answer: %w", err)
	}
	ev, err := decodeEvent(b)
	if err != nil {
		_ = ws.CloseNow()
		return nil, serverEvent{}, fmt.Errorf("decoding the resume answer: %w", err)
	}
	switch e := ev.ev.(type) {
	case protocol.SessionResumed:
		return ws, ev, nil
	case protocol.ErrorEvent:
		_ = ws.CloseNow()
		return nil, ev, decodeError(e)
	default:
		_ = ws.CloseNow()
		return nil, ev, fmt.Errorf("the resume was answered with %q", ev.env.Type)
	}
}
