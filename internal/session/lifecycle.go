package session

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// The response lifecycle as decisions of the core: each takes the responses (and what else it
// reads, passed in: the epoch, the time, whether an engine is open) and returns the actions
// (plan.go) the shell runs in order. None does I/O or reads a clock. A step that must see the
// state the actions before it leave is an input (endActive, responseDone...): the shell
// decides it when it reaches it (Session.decide).

// The lifecycle's inputs.
type (
	// endActive ends the active response (end_response(finished_reason)): its running MCP
	// calls fail, its engine turn ends with its outcome, the turn state becomes state.
	endActive struct{ reason, state string }
	// responseDone tells response.done of r with status, once the response has ended.
	responseDone struct {
		r       *response
		status  string
		details *StatusDetails
	}
	// nextEpoch advances the epoch and tells the engine (signal).
	nextEpoch struct{ signal string }
	// settled follows response.done of a completed r: the history is trimmed and the idle
	// follow-up armed; with followUp, a follow-up response starts when MCP results joined.
	settled struct {
		r        *response
		followUp bool
	}
	// startFollowUp starts a response of the session's own after MCP results (followUp).
	startFollowUp struct{ f followUp }
	// cancelActive is _cancel_active_response from source; wire is the status_details reason
	// the client sees, notify whether it sees the cancel at all.
	cancelActive struct {
		source, wire string
		notify       bool
	}
	// failActive fails the response r with code and msg (err: the engine's failure, if any).
	failActive struct {
		r         *response
		code, msg string
		err       error
	}
	// beginFollowUp begins the follow-up f, its engine open (followUpPlan).
	beginFollowUp struct{ f followUp }
	// commitInput commits the buffered input (Session.handleCommit), answered or not
	// (respond).
	commitInput struct{ respond bool }
	// replyOver begins a response under o over the conversation as it is and queues its
	// engine response.
	replyOver struct{ o respOptions }
	// syncTools tells a newly opened engine stream the session's tools.
	syncTools struct{}
	// paceOutput sends the active response's audio that is due, and completes it once drained.
	paceOutput struct{}
)

func (endActive) isAction()     {}
func (responseDone) isAction()  {}
func (nextEpoch) isAction()     {}
func (settled) isAction()       {}
func (startFollowUp) isAction() {}
func (cancelActive) isAction()  {}
func (failActive) isAction()    {}
func (paceOutput) isAction()    {}
func (commitInput) isAction()   {}
func (replyOver) isAction()     {}
func (syncTools) isAction()     {}
func (commitInput) isInput()    {}
func (replyOver) isInput()      {}
func (syncTools) isInput()      {}
func (beginFollowUp) isAction() {}
func (beginFollowUp) isInput()  {}
func (endActive) isInput()      {}
func (responseDone) isInput()   {}
func (nextEpoch) isInput()      {}
func (settled) isInput()        {}
func (startFollowUp) isInput()  {}
func (cancelActive) isInput()   {}
func (failActive) isInput()     {}
func (paceOutput) isInput()     {}

// ended ends the active response r (if any) in the state it leaves: r is no longer active, the
// turn state is state, its item is settled (in conv unless out of band), and its engine turn
// ends with reason and what was delivered and played (the one action).
func (rs *responses) ended(conv *conversation, reason, state string) []action {
	r := rs.end()
	if r == nil {
		return nil
	}
	rs.turnState = state
	if it := r.itemIn(conv); it != nil {
		r.settleItem(it)
	}
	return []action{endTurn{r: r, outcome: requestclient.TurnOutcome{Reason: reason, DeliveredMs: r.play.sentMs, UnderrunMs: r.play.underrunMs,
		PlayedMs: r.play.ackedMs, DetachedMs: r.play.detachedMs, ToolCalls: r.toolCalls, Unstarted: r.neverStarts()}}}
}

// completed ends r, which ran to its end: its turn is closed with the reason its finish maps to
// (doneStatus), then response.done goes out and the session settles (settled).
func completed(r *response, followUp bool) []action {
	status, reason, details := doneStatus(r.finish)
	return []action{endActive{reason: reason, state: turnIdle}, responseDone{r: r, status: status, details: details}, settled{r: r, followUp: followUp}}
}

// pace is the pacing of the active response at now: the frames due while at most leadMs ahead
// of real time, then the timer for the next one, or, once finished and drained (and no MCP
// call holds it), its completion. While detached nothing is sent: a response with nothing left
// to send still completes (into the journal).
func (rs *responses) pace(now time.Time, leadMs float64, detached bool) []action {
	r := rs.resp
	if r == nil {
		return nil
	}
	if detached {
		if r.finished && len(r.play.frames) == 0 && !r.mcp.holds() {
			return completed(r, true)
		}
		return nil
	}
	var acts []action
	for {
		f, wait, ok := r.play.nextFrame(now, leadMs)
		if !ok {
			if wait > 0 {
				return append(acts, armPace{wait: wait})
			}
			break
		}
		acts = append(acts, audioOut{ref: f.ref, evs: r.frameEvents(f)})
	}
	if r.finished && !r.mcp.holds() {
		acts = append(acts, completed(r, true)...)
	}
	return acts
}

// fail ends r as failed with code and msg at epoch. For an engine failure err a remote stage's
// upstream error is told with the upstream's type, code and param (engineErrorEvent); the
// response's status_details keep the session's own code.
func (rs *responses) fail(r *response, epoch int, code, msg string, err error) []action {
	r.play.frames = nil
	return []action{emit{evs: []Event{engineErrorEvent(epoch, code, msg, "", err)}}, dropStale{},
		endActive{reason: "error", state: turnIdle},
		responseDone{r: r, status: "failed", details: &StatusDetails{Type: "failed", Reason: code}},
		nextEpoch{signal: "response.cancel"}}
}

// cancel is _cancel_active_response at now: end the response with the mapped finished_reason
// (before the epoch moves, so the hook sees the ids), drop its queued audio, notify, advance the
// epoch and stop the engine work. With eng (nil: no engine, or the session closes) the text the
// user heard goes back to the engine's conversation as turn's, since the engine dropped the
// partial response. ok is false when no response is active.
func (rs *responses) cancel(c cancelActive, now time.Time, eng Engine, turn int) (acts []action, ok bool) {
	r := rs.resp
	if r == nil {
		return nil, false
	}
	acts = []action{dropStale{}, emit{evs: r.cut(now, c.notify)},
		endActive{reason: finishedReasonForCancel(c.source), state: turnBargeIn}}
	if c.notify {
		acts = append(acts, responseDone{r: r, status: "cancelled", details: &StatusDetails{Type: "cancelled", Reason: c.wire}})
	}
	acts = append(acts, nextEpoch{signal: cancelSignal(c.source)})
	if heard := r.heardText(); heard != "" && !r.outOfBand && eng != nil {
		acts = append(acts, queueJob{job: job{run: func(ctx context.Context) jobResult {
			return jobResult{err: eng.AppendText(ctx, turn, "assistant", heard), errCode: "runtime_append_failed"}
		}}, full: []action{
			logLine{warn: true, msg: "dropping the heard assistant text: engine job queue full", fields: []zap.Field{zap.Int("chars", len(heard))}},
			errorOut{code: "input_backpressure", msg: "too many pending engine jobs; the assistant text heard before the interruption was not kept in the conversation"}}})
	}
	return acts, true
}

// followUpAfter is what follows a completed response r: a follow-up, when it was asked for and
// MCP results of r joined the conversation (the input's "no input": nothing).
func followUpAfter(in settled) action {
	if in.followUp && in.r.mcp.followUp {
		return startFollowUp{f: followUp{depth: in.r.mcp.depth + 1}}
	}
	return noAction{}
}

// noAction is the action that does nothing.
type noAction struct{}

func (noAction) isAction() {}

// followUpPlan starts the follow-up f after MCP results joined the conversation, while a
// response is active or not and the session is closing or not. With a response already active
// (the user spoke meanwhile) none starts: the results stay in the conversation for it. An
// approved call (f.call) runs first in the response, whose model reply follows it
// (mcpResp.afterCall); otherwise the engine stream must open first.
func followUpPlan(f followUp, active, closing bool) []action {
	if f.call != nil {
		return []action{beginFollowUp{f: f}}
	}
	if active || closing {
		return nil
	}
	return []action{openEngine{then: []action{beginFollowUp{f: f}}}}
}

// beginning is what a response begins with (beginResponse): the engine's own turn it answers
// (stageTurn, -1: the input's), the input turn it otherwise answers, the epoch, its options,
// its id, the function calls timed for its turn, and the statistics clock's now.
type beginning struct {
	stageTurn int
	input     int
	epoch     int
	o         respOptions
	id        string
	calls     []metrics.ToolCallStats
	now       float64
}

// begin opens a response (begin_response) in conv: its ids, the turn state, its item and the
// response.created sequence, after its engine turn begins. next is the input turn that
// follows it: the response answers the input built so far (or the engine's own turn, which
// already answered it), and the next input is a new turn.
func (rs *responses) begin(b beginning, conv *conversation, st *settings) (r *response, next int, acts []action) {
	rs.turnID++
	turn := b.stageTurn
	if turn < 0 {
		turn = b.input
	}
	o := b.o
	r = &response{
		id: b.id, epoch: b.epoch, turnID: rs.turnID, turn: requestclient.NewTurn(turn),
		audio: o.audio, maxTokens: o.maxTokens, temperature: o.temperature, play: playback{playedMs: -1, ackedMs: -1}, format: o.format, metadata: o.metadata,
		inputUsage: rs.audioUsage(o, conv.audioTokens()), outOfBand: o.outOfBand, ownInput: o.input != nil,
		mcp: mcpResp{refs: o.mcpRefs, depth: o.mcpDepth},
	}
	r.itemID = "item_" + r.id
	r.toolCalls = b.calls
	rs.resp = r
	rs.turnState = turnAssistantGenerating
	if b.stageTurn >= 0 {
		r.turn.Bind(b.stageTurn) // the engine's own turn: its outputs already carry it
	}
	it := &item{ID: r.itemID, Role: "assistant", Type: "message", Status: "in_progress", ResponseID: r.id, Audio: r.audio}
	r.item = it
	r.prevItemID = conv.lastID()
	if !r.outOfBand {
		conv.insert(it, "")
	}
	return r, max(b.input, turn+1), []action{beginTurn{r: r, turn: turn, bind: b.stageTurn, arrival: b.now}, emit{evs: rs.startedEvents(r, st, it)}}
}

// replyJob queues the engine response of r under o on eng (as response.create does); a full
// queue fails r.
func replyJob(r *response, o respOptions, eng Engine) queueJob {
	return queueJob{job: job{responseID: r.id, run: func(ctx context.Context) jobResult {
		if !r.claimEngine() {
			return jobResult{}
		}
		t, err := o.respond(ctx, eng, r.turn)
		return jobResult{turn: t, haveTurn: err == nil, err: err, errCode: "runtime_respond_failed"}
	}}, full: []action{failActive{r: r, code: "input_backpressure", msg: "too many pending engine jobs"}}, jobbed: r}
}

// decide is the core's step for one input the shell reached (an input action): it calls the
// decision with the sub-states, the epoch and the clock, and returns its actions.
func (s *Session) decide(in input) []action {
	switch in := in.(type) {
	case endActive:
		s.tools.cancelCallsOf(s.responses.resp)
		return s.responses.ended(&s.conv, in.reason, in.state)
	case responseDone:
		return []action{emit{evs: s.responses.doneEvents(in.r, &s.settings, &s.conv, in.status, in.details)}}
	case nextEpoch:
		s.epoch++
		return []action{signal{name: in.signal}}
	case settled:
		s.idle.armAfter(s.settings.cfg.TurnDetection, in.r, s.m.cfg.Now(), s.inputAudio.inputMs, s.attachment.detached)
		return []action{trimHistory{}, followUpAfter(in)}
	case startFollowUp:
		return followUpPlan(in.f, s.responses.resp != nil, s.closeReason != "")
	case beginFollowUp:
		s.responses.pendingIn++ // the results are input the follow-up answers
		o := s.tools.followUpOptions(s.settings.cfg, in.f.depth)
		r := s.beginResponse(-1, o)
		if in.f.call == nil {
			return []action{replyJob(r, o, s.link.engine)}
		}
		r.mcp.start = func() { s.run(replyJob(r, o, s.link.engine)) }
		in.f.call.ID, in.f.call.ResponseID = newItemID(), r.id
		return []action{emitCall{r: r, call: in.f.call, args: in.f.args}}
	case cancelActive:
		acts, _ := s.responses.cancel(in, s.m.cfg.Now(), s.link.while(s.state == "open"), s.input)
		return acts
	case commitInput:
		s.handleCommit(&CommitInput{ResponseCreate: &in.respond})
	case replyOver:
		return []action{replyJob(s.beginResponse(-1, in.o), in.o, s.link.engine)}
	case syncTools:
		s.tools.sync(s.settings.cfg)
	case failActive:
		return s.responses.fail(in.r, s.epoch, in.code, in.msg, in.err)
	case paceOutput:
		return s.responses.pace(s.m.cfg.Now(), float64(outputLead(s.settings.opts, s.m.cfg.MaxOutputLead))/float64(time.Millisecond), s.attachment.detached)
	}
	return s.decideInput(in)
}
