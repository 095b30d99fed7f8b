package session

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"time"

	"go.uber.org/zap"
)

// Resume errors, mapped to wire error codes by internal/realtime.
var (
	// ErrSessionGone: no such session here (never existed on this replica, ended, or its resume
	// grace expired).
	ErrSessionGone = errors.New("session not found")
	// ErrResumeToken: the token is not the session's current one (wrong, or already used by a
	// resume, which rotated it).
	ErrResumeToken = errors.New("invalid resume token")
	// errResumeDisabled: the server keeps no session after a disconnect (resume grace 0).
	errResumeDisabled = errors.New("session resume is disabled on this server")
)

// ReasonResumeExpired ends a detached session whose resume grace ran out; the turn it cut is
// logged with finished_reason close.
const ReasonResumeExpired = "resume_expired"

// ResumeRequest is a client's attempt to take over a session from a new connection.
type ResumeRequest struct {
	Token string
	// Attach moves the session's output to the new connection. It runs on the session actor,
	// between two events, only after the token matched, and reports whether every event the
	// client missed can still be replayed (false: the client must resync).
	Attach func() (complete bool)
}

// ResumeResult is what the new connection sends first: session.resumed.
type ResumeResult struct {
	// Event is session.resumed, without the connection's own fields (seq figures).
	Event Event
	// Gen identifies the attachment, for Disconnected.
	Gen int
	// Resync is true when the journal no longer held every missed event.
	Resync bool
}

type resumeCall struct {
	req   ResumeRequest
	reply chan resumeReply // buffered(1)
}

type resumeReply struct {
	res ResumeResult
	err error
}

// newResumeToken returns 32 random bytes, URL-safe base64. It is a bearer secret: it is never
// logged.
func newResumeToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// attachment is the session's connection: which attachment is current, whether the session is
// detached (its connection lost, waiting for a resume until the grace timer fires) and since
// when, the current resume token (a bearer secret, never logged; "" when resume is off), and
// the channels that bring the actor a lost connection (Disconnected) and a resume attempt
// (Resume). It sends nothing and logs nothing: the actor's detach and resume act on what it
// reports.
type attachment struct {
	lost        chan int        // buffered(1): the generation of a connection that was lost
	resumes     chan resumeCall // a resume attempt, answered on its reply channel
	resumeToken string
	attachGen   int // 0 the first connection, +1 per resume
	detached    bool
	detachedAt  time.Time
	graceTimer  *time.Timer // the resume grace of a detached session; stopped otherwise
}

func newAttachment(resumable bool) attachment {
	a := attachment{graceTimer: time.NewTimer(time.Hour), lost: make(chan int, 1), resumes: make(chan resumeCall)}
	a.graceTimer.Stop()
	if resumable {
		a.resumeToken = newResumeToken()
	}
	return a
}

// lose reports whether the loss of attachment gen's connection detaches the session (a stale
// gen, or a session already detached, changes nothing) and, when it does, starts the grace at
// now.
func (a *attachment) lose(gen int, now time.Time, grace time.Duration) bool {
	if gen != a.attachGen || a.detached {
		return false
	}
	a.detached, a.detachedAt = true, now
	a.graceTimer.Reset(grace)
	return true
}

// tokenMatches compares token with the current one in constant time.
func (a *attachment) tokenMatches(token string) bool {
	return subtle.ConstantTimeCompare([]byte(token), []byte(a.resumeToken)) == 1
}

// reattach moves the session to a new attachment at now: the token rotates (the old one is
// void), the grace stops, and gap is how long it was detached (0 when it was not).
func (a *attachment) reattach(now time.Time) (gap time.Duration, wasDetached bool) {
	a.attachGen++
	a.resumeToken = newResumeToken()
	if !a.detached {
		return 0, false
	}
	a.detached = false
	stopTimer(a.graceTimer)
	return now.Sub(a.detachedAt), true
}

// Resumable reports whether the session outlives an abrupt disconnect (resume grace > 0).
func (s *Session) Resumable() bool { return s.m.cfg.ResumeGrace > 0 }

// Sink returns the sink the session sends its events to (internal/realtime's stream, which
// outlives connections).
func (s *Session) Sink() Sink { return s.sink }

// Done is closed when Run has returned; CloseReason is then the reason.
func (s *Session) Done() <-chan struct{} { return s.done }

// CloseReason is the reason Run returned; valid after Done is closed.
func (s *Session) CloseReason() string {
	<-s.done
	return s.endReason
}

// Tracing is session.tracing as the session had it when Run returned (nil, "auto" or the
// tracing object): the session span is named and tagged from it at close. Waits for Done.
func (s *Session) Tracing() any {
	<-s.done // cfg is the actor's until Run returns
	return s.settings.cfg.Tracing
}

// Disconnected tells the session that the connection of attachment gen was lost without a
// close frame. A resumable session detaches: it keeps its engine stream, conversation and slot
// for the resume grace, its active response keeps generating (events go to the stream's
// journal, audio waits with pacing paused). A stale gen (the session already moved to a newer
// connection) is ignored.
func (s *Session) Disconnected(gen int) {
	select {
	case s.attachment.lost <- gen:
	case <-s.done:
	}
}

// Resume validates req.Token (in constant time) and moves the session to the caller's
// connection. A session still attached to another connection is taken over (that connection is
// closed by the stream). The token is rotated: the old one is void from now on.
func (s *Session) Resume(ctx context.Context, req ResumeRequest) (ResumeResult, error) {
	if !s.Resumable() {
		return ResumeResult{}, errResumeDisabled
	}
	call := resumeCall{req: req, reply: make(chan resumeReply, 1)}
	select {
	case s.attachment.resumes <- call:
	case <-s.done:
		return ResumeResult{}, ErrSessionGone
	case <-ctx.Done():
		return ResumeResult{}, context.Cause(ctx)
	}
	select {
	case r := <-call.reply:
		return r.res, r.err
	case <-s.done:
		return ResumeResult{}, ErrSessionGone
	}
}

// detach is the actor's side of Disconnected.
func (s *Session) detach(gen int) {
	if gen != s.attachment.attachGen || s.attachment.detached || s.closeReason != "" {
		return
	}
	if !s.Resumable() {
		s.closeReason = ReasonDisconnect
		return
	}
	s.attachment.lose(gen, s.m.cfg.Now(), s.m.cfg.ResumeGrace)
	s.m.setDetached(s, true, s.attachment.detachedAt)
	stopTimer(s.timers.pace)
	s.idle.stop()
	stopTimer(s.timers.idle) // the grace bounds a detached session, not the idle timeout
	s.log.Info("session detached; waiting for a resume", zap.Duration("grace", s.m.cfg.ResumeGrace))
}

// resume is the actor's side of Resume.
func (s *Session) resume(call resumeCall) {
	reply := func(res ResumeResult, err error) { call.reply <- resumeReply{res: res, err: err} }
	if s.closeReason != "" || s.state != "open" {
		reply(ResumeResult{}, ErrSessionGone)
		return
	}
	if !s.attachment.tokenMatches(call.req.Token) {
		s.log.Info("session resume refused: invalid token", zap.Bool("detached", s.attachment.detached))
		reply(ResumeResult{}, ErrResumeToken)
		return
	}
	complete := call.req.Attach()
	gap, wasDetached := s.attachment.reattach(s.m.cfg.Now())
	if wasDetached {
		s.m.setDetached(s, false, time.Time{})
		if r := s.responses.resp; r != nil {
			// Delivery was paused for the gap: the playback clock resumes where it stopped, and
			// the turn records the gap as delivery delay.
			if !r.play.started.IsZero() {
				r.play.started = r.play.started.Add(gap)
			}
			r.play.detachedMs += float64(gap) / float64(time.Millisecond)
		}
	}
	resetTimer(s.timers.idle, s.settings.cfg.IdleTimeout)
	ev := SessionResumed{SessionID: s.id, ResumeToken: s.attachment.resumeToken, ResyncRequired: !complete,
		Session: sessionUpdated(sessionView(&s.settings, s.m.cfg, sessionFacts{s.id, s.expiresAt, s.state, s.epoch, &s.responses}), &s.settings, false)}
	if !complete {
		items := s.conv.views()
		ev.Items = &items
		if r := s.responses.resp; r != nil {
			o := s.responses.info(r, &s.settings, "in_progress", nil, []Item{}, nil)
			ev.Response = &o
		}
	}
	s.log.Info("session resumed", zap.Duration("gap", gap), zap.Bool("resync_required", !complete))
	reply(ResumeResult{Event: Event{Epoch: s.epoch, Beta: s.settings.opts.Beta, Effect: ev}, Gen: s.attachment.attachGen, Resync: !complete}, nil)
	// Output paused while detached goes on; it queues behind the replay on the new connection.
	s.run(paceOutput{})
}

// stopTimer stops t and drains a tick that already fired, so that a later Reset starts clean.
func stopTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
}
