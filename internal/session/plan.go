package session

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/mcpclient"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// An action is one effect of a decision: the decisions of the conversation core (the response
// lifecycle in lifecycle.go, the input path in input_path.go) return them as values, without
// I/O or clock reads, and the shell runs them in order (Session.run). Three kinds:
//   - the client's events (emit, errorOut, audioOut, dropStale);
//   - the engine's calls (engineCall: beginTurn, endTurn, signal, appendCall...), the jobs to
//     queue (queueJob, with what a full queue does instead) and the timers to arm (armPace);
//   - a next input to the core (an input: endActive, responseDone, nextEpoch...), decided when
//     the shell reaches it (Session.decide), because it must see the state the actions before
//     it left (the calls a cancelled response still ran, its item settled).
type action interface{ isAction() }

// emit sends events to the client as they are.
type emit struct{ evs []Event }

// errorOut sends an error event at the epoch current when it runs.
type errorOut struct{ code, msg, eventID, param string }

// dropStale drops what the outbound queue still holds of the epochs before the next one.
type dropStale struct{}

// audioOut is one paced frame of assistant audio: its events, and its 16 kHz copy (ref, nil
// while no VAD listens) for the echo canceller.
type audioOut struct {
	ref []float32
	evs []Event
}

// armPace arms the pacing timer for the next frame.
type armPace struct{ wait time.Duration }

// queueJob queues an engine job; full is run instead when the queue has no room, and jobbed
// (when set) is marked as having its job queued.
type queueJob struct {
	job    job
	full   []action
	jobbed *response
}

// openEngine opens the engine stream if it is not open (Session.ensureEngine, which tells the
// client why not) and then runs then; nothing of then runs without a stream.
type openEngine struct {
	eventID string
	then    []action
}

// logLine is a line of the session's log.
type logLine struct {
	warn   bool // else debug
	msg    string
	fields []zap.Field
}

// emitCall starts an approved MCP call in its response (toolState.emitCallItem).
type emitCall struct {
	r    *response
	call *item
	args string
}

func (emit) isAction()       {}
func (errorOut) isAction()   {}
func (dropStale) isAction()  {}
func (audioOut) isAction()   {}
func (armPace) isAction()    {}
func (queueJob) isAction()   {}
func (openEngine) isAction() {}
func (logLine) isAction()    {}
func (emitCall) isAction()   {}

// An engineCall is a call on the open engine stream, run by the shell through engineLink; it
// returns what follows from its answer (a job, an error event). Without a stream it is a no-op.
type engineCall interface {
	action
	call(l *engineLink, fence requestclient.Fence) []action
}

// An input is the next step of the core, decided when the shell reaches it (Session.decide).
type input interface {
	action
	isInput()
}

// run runs the actions acts in order: the shell's one place that turns a decision into I/O.
func (s *Session) run(acts ...action) {
	for _, a := range acts {
		switch a := a.(type) {
		case emit:
			s.send(a.evs...)
		case errorOut:
			s.sendError(a.code, a.msg, a.eventID, a.param)
		case dropStale:
			s.sink.DropStale(s.epoch + 1)
		case audioOut:
			s.settings.assistantAudio = true
			s.inputAudio.reference(a.ref)
			s.send(a.evs...)
		case armPace:
			s.timers.pace.Reset(a.wait)
		case queueJob:
			s.run(a.queued(s.submitJob(a.job))...)
		case openEngine:
			s.run(a.opened(s.ensureEngine(a.eventID))...)
		case logLine:
			a.write(s.log)
		case emitCall:
			s.tools.emitCallItem(a.r, a.call, a.args)
		case engineCall:
			s.run(s.link.call(a, requestclient.Fence{SessionID: s.id, Epoch: s.epoch})...)
		case timerCall:
			a.apply(&s.sem, &s.idle)
		case openAhead:
			fence := requestclient.Fence{SessionID: s.id, Epoch: s.epoch}
			s.run(a.opened(s.link.ahead(s.m.backend, fence, openOptions(&s.settings, s.m.cfg.MaxHistoryBytes), s.outputQueue.deliver))...)
		case input:
			s.run(s.decide(a)...)
		}
	}
}

// queued is what follows the job's queueing, ok or refused (the queue full).
func (q queueJob) queued(ok bool) []action {
	if !ok {
		return q.full
	}
	if q.jobbed != nil {
		q.jobbed.jobbed = true
	}
	return nil
}

// opened is what follows the engine's opening, ok or not.
func (o openEngine) opened(ok bool) []action {
	if !ok {
		return nil
	}
	return o.then
}

// write writes the line to log.
func (l logLine) write(log *zap.Logger) {
	if l.warn {
		log.Warn(l.msg, l.fields...)
		return
	}
	log.Debug(l.msg, l.fields...)
}

// while is the open stream while ok (nil: none, or not ok).
func (l *engineLink) while(ok bool) Engine {
	if !ok {
		return nil
	}
	return l.engine
}

// call makes the engine call c under fence, when a stream is open (else it is a no-op), and
// returns what follows from its answer.
func (l *engineLink) call(c engineCall, fence requestclient.Fence) []action {
	if l.engine == nil {
		return nil
	}
	return c.call(l, fence)
}

// cancelCallsOf fails the running MCP calls of r, which is ending (cancelled, interrupted,
// failed or closed): their goroutines stop with the cancel, their results are dropped. r nil:
// no response is active, nothing to fail.
func (t *toolState) cancelCallsOf(r *response) {
	if r == nil {
		return
	}
	for _, c := range t.mcp.takeCallsOf(r) {
		t.finishMCPCall(c, "", &mcpclient.Error{Kind: mcpclient.KindProtocol, Message: errMCPCallCancelled.Error(), Err: errMCPCallCancelled}, time.Since(c.started))
	}
	r.mcp.start = nil
}

// The engine calls.
type (
	// beginTurn opens the metrics turn of r, which answers input turn at arrival (the
	// response's birth; keep-first: an earlier stamp of the input stays), binding it to the
	// engine's own turn bind when that is known (>= 0).
	beginTurn struct {
		r       *response
		turn    int
		bind    int
		arrival float64
	}
	// endTurn ends the turn of r with its outcome; a cancelled response's input that is still
	// queued is settled by a job behind it.
	endTurn struct {
		r       *response
		outcome requestclient.TurnOutcome
	}
	// signal tells the engine the epoch moved (response.cancel, barge-in...), under the new fence.
	signal struct{ name string }
)

func (beginTurn) isAction() {}
func (endTurn) isAction()   {}
func (signal) isAction()    {}

func (b beginTurn) call(l *engineLink, _ requestclient.Fence) []action {
	arrival := l.engine.MarkTurnArrival(b.turn, b.arrival)
	b.r.turn = l.engine.BeginTurn(b.turn, b.r.id, b.r.turnID, arrival)
	l.budget = prefillBudget{} // the response reads the input admitted so far
	if b.bind >= 0 {
		b.r.turn.Bind(b.bind) // the engine's own turn: its outputs already carry it
	}
	return nil
}

func (e endTurn) call(l *engineLink, _ requestclient.Fence) []action {
	_, settle := l.engine.EndTurn(e.r.turn, e.outcome)
	if settle == nil {
		return nil
	}
	return []action{queueJob{job: settleJob(settle, l.obs.log), full: []action{logLine{
		msg: "no room to settle the input of a cancelled response; its turn is recorded when the stream closes"}}}}
}

func (sg signal) call(l *engineLink, fence requestclient.Fence) []action {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.engine.Signal(ctx, sg.name, fence); err != nil {
		return []action{logLine{warn: true, msg: "signalling the engine", fields: []zap.Field{zap.String("event", sg.name), zap.Error(err)}},
			errorOut{code: "runtime_abort_failed", msg: fmt.Sprintf("stopping the engine work: %v", err)}}
	}
	return nil
}
