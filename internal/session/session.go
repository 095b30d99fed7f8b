package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// Options configures one session at creation.
type Options struct {
	// Duplex selects native full duplex (?duplex=1); false is turn-based realtime
	// (response_required only).
	Duplex bool
	// Model is the model the client asked for ("" = the server's).
	Model string
	// Beta selects the beta Realtime dialect's session shape (OpenAI-Beta: realtime=v1); the
	// connection renames the server events.
	Beta bool
	// Initial is the configuration a client secret was minted with (POST
	// /v1/realtime/client_secrets): applied before session.created, so that event shows it.
	// Validated at minting (Manager.Preview); a patch that no longer applies is logged and
	// dropped.
	Initial *ConfigPatch
	// Transcription opens a transcription session (?intent=transcription, transcription.go):
	// committed audio is transcribed and nothing answers it.
	Transcription bool
	// Dialect names the wire protocol the connection speaks (metrics.Dialects): a label on the
	// session's turns in statistics, Prometheus and traces. The session's behaviour never
	// depends on it: the dialect's translator is what differs.
	Dialect string
	// MaxOutputLead, when set, bounds how far this session's audio is sent ahead of real time
	// below the server's ManagerConfig.MaxOutputLead (output_lead.go).
	MaxOutputLead time.Duration
	// OutputFrame, when set, is the length of the audio deltas the reply is cut into (default
	// 100 ms): with a small lead, frames smaller than it (output_lead.go).
	OutputFrame time.Duration
	// EndsAtExpiry ends the session at its expires_at (ManagerConfig.MaxSessionLength after its
	// creation) with ReasonExpired: the open turn is finalized as at a client's close and
	// session.closed is the last event. GPT-Live's sessions do; the other dialects only report
	// expires_at.
	EndsAtExpiry bool
}

// Close reasons reported in session.closed and returned by Run.
const (
	ReasonClientClose = "client_close"
	ReasonDisconnect  = "disconnect"
	ReasonTimeout     = "timeout"
	ReasonShutdown    = "shutdown"
	ReasonSlowClient  = "slow_client"
	// ReasonInternalError ends a session whose actor or job goroutine panicked: the panic is
	// logged with its stack and counted (omniserve_panics_total), the client gets an error
	// event, and the open turn is finalized as an abort.
	ReasonInternalError = "internal_error"
	// ReasonEvicted ends a detached session whose slot a new client needs (Manager.Acquire).
	ReasonEvicted = "evicted"
	// ReasonExpired ends a session that reached its expires_at (Options.EndsAtExpiry).
	ReasonExpired = "expired"
)

// Turn states, named as in vllm-omni's Session.
const (
	turnIdle                = "idle"
	turnUserSpeaking        = "user_speaking"
	turnUserCommitted       = "user_committed"
	turnAssistantGenerating = "assistant_generating"
	turnAssistantPlaying    = "assistant_playing"
	turnBargeIn             = "barge_in"
)

// Session is the actor that owns all state of one realtime session: the shell around the
// conversation core. Its Run goroutine is the only one touching that state; other goroutines
// talk to it through bounded channels.
//
// Its state is split by concern into the sub-states below, plain fields (never embedded), one
// file each, each with its own methods and tests (the package doc lists them). Their decisions
// take the sub-state and one typed input and return the effects (Events) and the plan; the
// Session runs them: it sends the events, makes the engine calls, queues the jobs and keeps
// the timers.
type Session struct {
	settings   settings     // configuration: cfg, opts, what limits session.update (settings.go)
	inputAudio inputAudio   // input audio: decoding, noise reduction, echo, overlap VAD, buffer (input.go)
	responses  responses    // the active response and its counters (responses.go)
	conv       conversation // the conversation's items (conversation.go)
	tools      toolState    // MCP servers, the tool-call items, what the engine was given (toolstate.go)
	tx         transcriber  // input transcription: live deltas, a transcription session's records (transcription.go)

	id   string
	m    *Manager
	sink Sink
	log  *zap.Logger

	inbox    chan Command
	inboxB   *byteBudget // bytes of the commands in inbox
	ctl      control     // Stop and the server's drain, to the actor
	jobQueue jobQueue    // engine jobs in wire order and their results (jobs.go)

	// done is closed when Run returns, with endReason set.
	done      chan struct{}
	endReason string

	outputQueue outputQueue // the engine's outputs on their way to the actor (jobs.go)

	// State below is owned by the Run goroutine.
	link  engineLink // the engine stream, its context and the settings it was opened with (engine_link.go)
	state string
	epoch int
	// input is the id of the turn the user's input is building: every input and response
	// goes to the engine with it, a response takes it (the next input is input+1), and a clear
	// abandons it. Ids are never reused.
	input       int
	timers      sessionTimers // output pacing and the session's idle timeout
	idle        idleFollowUp  // turn_detection.idle_timeout_ms after a response (idle.go)
	closeReason string
	sinkBroken  bool // the connection refused an event: nothing more can be sent

	attachment attachment // the connection, the resume token, Disconnected and Resume's channels (resume.go)

	expiresAt time.Time
	sem       semState // semantic_vad's pause and end-of-turn estimate (semvad.go)
}

// control carries what other goroutines tell the actor besides commands: a Stop reason (also
// the connection's end: Run's context, through context.AfterFunc), and the server's drain with
// its grace. Each is buffered(1): telling never blocks.
type control struct {
	stop  chan string
	drain chan time.Duration
}

// sessionTimers are the actor's own timers: the next paced frame of output (responses.pace,
// armPace), the session's idle timeout (idle, reset by every client command), its expires_at
// (expiry; nil unless Options.EndsAtExpiry), and a session.close held behind the outcome of
// the commits before it, with its bound (closewait.go).
type sessionTimers struct {
	pace      *time.Timer
	idle      *time.Timer
	expiry    *time.Timer
	closeHold closeWait
}

// expiryTimer stops the session with ReasonExpired at expiresAt (now is the session's clock),
// through stop (Session.Stop: never blocks, and a reason already queued, such as the client's
// own close, wins); nil for a session that does not end there. The actor stops it when Run ends.
func expiryTimer(opts Options, expiresAt, now time.Time, stop func(reason string)) *time.Timer {
	if !opts.EndsAtExpiry {
		return nil
	}
	return time.AfterFunc(max(0, expiresAt.Sub(now)), func() { stop(ReasonExpired) })
}

// NewSession creates a session that will hold slot until Run returns. sink receives its events.
func (m *Manager) NewSession(slot *Slot, opts Options, sink Sink) *Session {
	id := "duplex-" + uuid.NewString()
	s := &Session{
		id:          id,
		m:           m,
		sink:        sink,
		inbox:       make(chan Command, 64),
		inboxB:      newByteBudget(m.cfg.MaxInboxBytes),
		ctl:         control{stop: make(chan string, 1), drain: make(chan time.Duration, 1)},
		jobQueue:    newJobQueue(maxQueuedJobs),
		outputQueue: newOutputQueue(),
		done:        make(chan struct{}),
		state:       "open",
		responses:   newResponses(id, m.cfg.DefaultMaxOutputTokens),
		expiresAt:   m.cfg.Now().Add(m.cfg.MaxSessionLength),
		settings:    newSettings(opts, m.cfg),
		input:       1,
		conv:        conversation{turn: 1},
	}
	s.attachment = newAttachment(m.cfg.ResumeGrace > 0)
	s.log = m.log.With(zap.String("session_id", s.id))
	errCounter, _ := m.cfg.Metrics.(engineErrorCounter)
	s.link.obs = engineObserver{log: s.log, counter: errCounter}
	// The seams reach the session through narrow fields, on the actor only.
	emit := func(e Effect) { s.send(Event{Epoch: s.epoch, Effect: e}) }
	txMetrics, _ := m.cfg.Metrics.(transcriptionMetrics)
	s.tx = transcriber{transcriptionSession: opts.Transcription, sessionID: s.id, send: emit, submit: s.submitJob,
		settings: &s.settings, items: &s.conv, wall: m.cfg.WallClock, log: s.log, metrics: txMetrics,
		logStats: m.cfg.LogStats, structured: m.cfg.StructuredStats}
	eotObserver, _ := m.cfg.Metrics.(endOfTurnObserver)
	s.sem = semState{send: emit, log: s.log, observer: eotObserver, wall: m.cfg.WallClock}
	s.tools.io = toolIO{send: func(ev Event) { s.send(ev) }, sendError: s.sendError, submit: s.submitJob, newItem: s.newClientItem,
		engine: func() (Engine, int) { return s.link.engine, s.input },
		rule:   func() admitRule { return newAdmitRule(s.m, s.settings.cfg) },
		budget: func() *prefillBudget { return &s.link.budget },
		room:   func() int { return cap(s.jobQueue.jobs) - len(s.jobQueue.jobs) },
		afterCall: func(r *response) {
			// A call of r ended: its model reply starts, or its pacing goes on (mcpResp.afterCall).
			if start, pace := r.mcp.afterCall(r == s.responses.resp); start != nil {
				start()
			} else if pace {
				s.run(paceOutput{})
			}
		}, countCall: m.observeToolCall, wallNow: m.cfg.WallClock, conv: &s.conv, log: s.log}
	if opts.Initial != nil {
		if cfg, err := nextConfig(&s.settings, m, false, *opts.Initial); err != nil {
			s.log.Warn("the client secret's session no longer applies; the defaults stand", zap.Error(err))
		} else {
			s.settings.cfg = cfg
		}
	}
	_ = slot // the caller releases the slot after Run returns; kept in the signature so a session cannot exist without one
	return s
}

// Preview is the session (as session.created tells it) a new session with opts would
// have after patch, or the refusal (a *FieldError for a bad field): how POST
// /v1/realtime/client_secrets validates and echoes the session it mints a key for. It takes no
// slot and starts nothing.
func (m *Manager) Preview(opts Options, patch ConfigPatch) (SessionView, error) {
	opts.Initial = nil
	s := m.NewSession(nil, opts, nil)
	cfg, err := nextConfig(&s.settings, m, false, patch)
	if err != nil {
		return SessionView{}, err
	}
	s.settings.cfg = cfg
	return sessionView(&s.settings, s.m.cfg, sessionFacts{s.id, s.expiresAt, s.state, s.epoch, &s.responses}), nil
}

// ID returns the session id, duplex-<uuid>.
func (s *Session) ID() string { return s.id }

// Submit hands a command to the actor, waiting while its bounded inbox is full (which in turn
// stops the reader and lets TCP push back on the client).
func (s *Session) Submit(ctx context.Context, c Command) error {
	n := commandBytes(c)
	if err := s.inboxB.acquire(ctx, n); err != nil {
		return err
	}
	select {
	case s.inbox <- c:
		return nil
	case <-ctx.Done():
		s.inboxB.release(n)
		return context.Cause(ctx)
	}
}

// Stop asks the session to end with reason (shutdown, disconnect); it never blocks.
func (s *Session) Stop(reason string) {
	select {
	case s.ctl.stop <- reason:
	default:
	}
}

// Run is the actor loop. It returns the close reason after releasing the engine; the caller
// then closes the connection and releases the slot.
func (s *Session) Run(ctx context.Context, first *UpdateSession) (reason string) {
	defer func() {
		s.endReason = reason
		close(s.done)
	}()
	if !s.m.track(s) {
		s.send(Event{Epoch: s.epoch, Effect: SessionClosed{SessionID: s.id, Reason: ReasonShutdown}})
		return ReasonShutdown
	}
	defer s.m.untrack(s)
	defer s.inputAudio.closeVAD()
	defer s.sem.stopTimer()
	s.tools.open()
	defer s.tools.close()
	defer s.inputAudio.closeDenoise()
	defer s.attachment.graceTimer.Stop()
	defer s.timers.closeHold.stop()
	defer s.m.setDetached(s, false, time.Time{})

	jobCtx, cancelJobs := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// The job goroutine's root: a panic there is logged and counted, and the actor is told
		// to end the session (its results would otherwise never arrive).
		defer func() {
			if p := recover(); p != nil {
				recovered(s.log, s.m.cfg.Metrics, "session_jobs", p)
				s.Stop(ReasonInternalError)
			}
		}()
		s.jobQueue.runJobs(jobCtx)
	}()
	s.link.ctx = jobCtx

	s.timers.idle = time.NewTimer(s.settings.cfg.IdleTimeout)
	if s.timers.expiry = expiryTimer(s.settings.opts, s.expiresAt, s.m.cfg.Now(), s.Stop); s.timers.expiry != nil {
		defer s.timers.expiry.Stop()
	}
	s.timers.pace = time.NewTimer(time.Hour)
	s.timers.pace.Stop()
	s.idle = newIdleFollowUp()
	defer s.idle.stop()
	defer s.timers.idle.Stop()
	defer s.timers.pace.Stop()

	// session.created comes first, in the dialect the first update (if any) fixes; its
	// ResumeToken (an extension, empty unless resumable) is the bearer secret of session.resume
	// (docs/REALTIME.md).
	if first != nil {
		s.settings.detectDialect(first)
	}
	s.send(Event{Epoch: s.epoch, Effect: sessionCreated(sessionView(&s.settings, s.m.cfg, sessionFacts{s.id, s.expiresAt, s.state, s.epoch, &s.responses}), &s.settings, s.attachment.resumeToken)})
	if first != nil {
		s.handleUpdate(first)
	}
	// The connection's end (ctx) reaches the actor as a Stop, so that the loop's one select
	// waits on the session's own channels only.
	stopOnDisconnect := context.AfterFunc(ctx, func() { s.Stop(ReasonDisconnect) })
	reason = s.guardedLoop()
	stopOnDisconnect()
	s.shutdown(reason, func() {
		// No engine job may run after the engine is closed.
		cancelJobs()
		wg.Wait()
		s.sem.wg.Wait() // an end-of-turn estimate ends with the jobs' context
	})
	return reason
}

// guardedLoop is the actor's loop and its root: each pass waits for one message (next) and
// applies it; a handler may set closeReason, which ends the loop after that message. A panic in
// the actor ends this session, not the process: the session's state may be half-updated, so it
// is closed rather than continued.
func (s *Session) guardedLoop() (reason string) {
	defer func() {
		if p := recover(); p != nil {
			recovered(s.log, s.m.cfg.Metrics, "session", p)
			s.sendError("server_error", "internal error: the session ended", "", "")
			reason = ReasonInternalError
		}
	}()
	for s.closeReason == "" {
		if reason, end := s.next(); end {
			return reason
		}
	}
	return s.closeReason
}

// recovered logs a panic recovered at a goroutine root, with its stack, and counts it (m may be
// nil).
func recovered(log *zap.Logger, m ManagerMetrics, component string, p any) {
	log.Error("goroutine panicked", zap.String("component", component), zap.Any("panic", p), zap.Stack("stack"))
	if m != nil {
		m.CountPanic(component)
	}
}

// next waits for one message on any of the actor's channels and applies it; end reports the
// channels that end the session (idle timeout, Stop and with it the disconnect, resume grace
// expired) with their reason. All channels wait in one select, so none is preferred over another.
func (s *Session) next() (reason string, end bool) {
	select {
	case c := <-s.inbox:
		s.receive(c)
	case <-s.outputQueue.outNotify:
		s.drainOutputs()
	case r := <-s.jobQueue.results:
		s.handleResult(r)
	case r := <-s.tools.mcp.results:
		s.tools.handleResult(r, s.epoch, s.settings.cfg)
	case a := <-s.sem.results:
		s.run(turnEnd{stopped: s.sem.answered(s.link.ctx, a, semMoment{&s.inputAudio, s.settings.semanticVAD(), s.link.engine, s.input})})
	case <-s.sem.timerC():
		s.run(turnEnd{stopped: s.sem.timedOut(semMoment{&s.inputAudio, s.settings.semanticVAD(), s.link.engine, s.input})})
	case <-s.timers.pace.C:
		s.run(paceOutput{})
	case <-s.idle.timer.C:
		s.run(idleFired{})
	case <-s.timers.idle.C:
		return ReasonTimeout, true
	case g := <-s.ctl.drain:
		// Told at once, so the client can finish its turn and reconnect elsewhere.
		s.send(Event{Epoch: s.epoch, Effect: SessionClosing{
			SessionID: s.id, Reason: ReasonShutdown, GraceMs: g.Milliseconds()}})
	case r := <-s.ctl.stop:
		return r, true
	case gen := <-s.attachment.lost:
		s.detach(gen)
	case call := <-s.attachment.resumes:
		s.resume(call)
	case <-s.attachment.graceTimer.C:
		s.log.Info("resume grace expired; closing the session")
		return ReasonResumeExpired, true
	}
	return "", false
}

// vadResponds reports whether a turn the VAD ended is answered: turn_detection's
// create_response, unless a response is active or the session only transcribes.
func vadResponds(cfg Config, opts Options, active bool) bool {
	return cfg.TurnDetection != nil && cfg.TurnDetection.CreateResponse && !active && !opts.Transcription
}

// resetTimer restarts t for d, dropping a tick it already fired.
func resetTimer(t *time.Timer, d time.Duration) {
	stopTimer(t)
	t.Reset(d)
}

// submitJob queues a job; a full queue is input backpressure.
func (s *Session) submitJob(j job) bool {
	if !s.jobQueue.queue(j) {
		return false
	}
	s.link.fresh = false // the engine holds more than uncommitted audio now
	return true
}

// shutdown ends the active response with the close reason's mapping, closes the engine and
// emits session.closed (not after a disconnect: nobody is listening).
func (s *Session) shutdown(reason string, stopJobs func()) {
	s.state = "closing"
	cancelSource := cancelSourceFor(reason)
	quiet := unannounced(reason) || s.attachment.detached
	s.run(cancelActive{source: cancelSource, wire: reason, notify: !quiet})
	if drainsJobsAtClose(reason) {
		s.jobQueue.drain(s.link.ctx, closeDrainTimeout, s.handleResult, s.log)
	}
	stopJobs()
	closeEngine(s.link.engine, reason, cancelSource, s.log)
	// What the drained jobs did not complete never will: record it as cut short.
	s.tx.cancelOpen(reason, &s.inputAudio.speechItemID)
	if !quiet {
		s.send(Event{Epoch: s.epoch, Effect: SessionClosed{SessionID: s.id, Reason: reason}})
	}
	s.state = "closed"
}

// cancelSourceFor is the logged cancel reason of the response a session closing for reason
// cuts short; the wire keeps reason itself.
func cancelSourceFor(reason string) string {
	switch reason {
	case ReasonClientClose, ReasonEvicted, ReasonExpired:
		// The session's end, not the user's: the turn it cuts is logged `close`.
		return metrics.CancelSessionClose
	case ReasonShutdown, ReasonInternalError:
		// The server, not the client, ends the session: its engine work is aborted under it, as
		// vllm-omni's AsyncOmni._abort does at engine shutdown, so the turn logs `abort`.
		// The wire keeps reason "shutdown": only the logged reason is mapped, so the client
		// still learns why its session ended.
		return metrics.ReasonAbort
	case ReasonSlowClient:
		return metrics.CancelDisconnect
	case ReasonResumeExpired:
		return metrics.CancelDisconnectGraceExpired
	}
	return reason
}

// unannounced reports whether a session closing for reason lost its client (disconnect, slow
// client, resume expired, evicted): nobody hears its end, so it is not announced.
func unannounced(reason string) bool {
	return reason == ReasonDisconnect || reason == ReasonSlowClient || reason == ReasonResumeExpired || reason == ReasonEvicted
}

// drainsJobsAtClose reports whether a session closing for reason lets its queued jobs finish:
// input the session accepted (appends, items, the assistant text the user heard before an
// interruption) reaches the engine before it closes, so a close never races the queue. Not
// after a disconnect (the jobs' context is already cancelled, nothing queued could run) nor at
// shutdown or after a panic (the engine work is aborted under the session).
func drainsJobsAtClose(reason string) bool {
	return reason != ReasonDisconnect && reason != ReasonShutdown && reason != ReasonInternalError
}

// closeEngine ends the session's engine stream eng, if one was opened: aborted when the server
// ends the session, else closed with the finish reason of cancelSource.
func closeEngine(eng Engine, reason, cancelSource string, log *zap.Logger) {
	if eng == nil {
		return
	}
	if reason == ReasonShutdown || reason == ReasonInternalError {
		eng.Abort()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := eng.Close(ctx, finishedReasonForCancel(cancelSource)); err != nil {
		log.Warn("closing engine stream", zap.Error(err))
	}
	cancel()
}

// closeDrainTimeout bounds how long a closing session waits for its queued engine jobs.
const closeDrainTimeout = 5 * time.Second

// ensureEngine opens the engine stream on first use. A manual turn's first append opens it
// earlier (engineLink.ahead), and a session.update reopens such a fresh stream (ahead.go).
func (s *Session) ensureEngine(eventID string) bool {
	if s.link.engine != nil {
		return true
	}
	if s.m.backend == nil {
		s.sendError("server_error", "no engine is configured", eventID, "")
		return false
	}
	opts := openOptions(&s.settings, s.m.cfg.MaxHistoryBytes)
	eng, err := s.m.backend.Open(s.link.ctx, requestclient.Fence{SessionID: s.id, Epoch: s.epoch}, opts, s.outputQueue.deliver)
	if err != nil {
		s.log.Warn("opening engine stream", zap.Error(err))
		s.sendError("server_error", fmt.Sprintf("opening the engine stream: %v", err), eventID, "")
		if errors.Is(err, errCapacity) {
			s.sendError("resource_exhausted", "engine capacity exhausted", eventID, "")
		}
		return false
	}
	s.link.opened(eng, opts, false)
	s.tools.sync(s.settings.cfg)
	return true
}

// send runs the effects evs, in order: each goes to the connection as it is, until the
// connection refuses one (the session then closes as a slow client, and sends nothing more).
func (s *Session) send(evs ...Event) {
	for _, ev := range evs {
		if s.sinkBroken {
			return
		}
		ev.Beta = s.settings.opts.Beta
		if err := s.sink.Send(ev); err != nil {
			s.log.Info("outbound queue refused an event; closing", zap.Error(err))
			s.sinkBroken = true
			if s.closeReason == "" {
				s.closeReason = ReasonSlowClient
			}
			return
		}
		if s.timers.closeHold.observe(ev.Effect) && s.closeReason == "" {
			s.closeReason = s.timers.closeHold.reason // the outcome the held close waited for went out
		}
	}
}

func (s *Session) sendError(code, message, eventID, param string) {
	s.send(errorEvent(s.epoch, code, message, eventID, param))
}

// engineErrorEvent tells the client about an engine failure err. When a remote stage failed
// (requestclient.UpstreamErrorOf) the event carries the upstream's type, code and param and a
// message naming the stage and the upstream status; otherwise it is the error event of code and
// msg.
func engineErrorEvent(epoch int, code, msg, eventID string, err error) Event {
	ev := ErrorEvent(ErrorType(code), code, msg, eventID, "")
	if ue, ok := requestclient.UpstreamErrorOf(err); ok {
		ev = ErrorEvent(ue.Type, ue.Code, ue.Message, eventID, ue.Param)
	}
	ev.Epoch = epoch
	return ev
}

func firstNonEmpty(a ...string) string {
	for _, s := range a {
		if s != "" {
			return s
		}
	}
	return ""
}
