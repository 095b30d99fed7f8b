package session

import (
	"context"
	"fmt"
	"time"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// drainOutputs routes queued engine outputs: stale turns are dropped (epoch fence), decisions
// become response.listen / response.speak, turn output feeds the active response.
func (s *Session) drainOutputs() {
	for _, o := range s.outputQueue.takeOutputs() {
		if s.closeReason != "" {
			return
		}
		s.routeOutput(o)
	}
}

// routeOutput runs one engine output: responses.route decides where it goes (a pure plan), and
// the actor runs the plan, one case per route.
func (s *Session) routeOutput(o duplex.Output) {
	p := s.responses.route(o, s.link.aheadListens, s.settings.autoResponse())
	if p.handoff {
		// The engine moved to a newer turn while this response was open (auto-response handoff):
		// the old response ends as completed with what was sent.
		r := s.responses.resp
		r.play.frames = nil
		r.finished = true
		s.run(completed(r, false)...)
	}
	switch p.route {
	case routeAppendFailed:
		cause := s.link.obs.engineFailed("runtime_append_failed", o.Err, true, s.epoch)
		s.send(engineErrorEvent(s.epoch, "runtime_append_failed", engineErrorMessage(o.Err, cause), "", o.Err))
	case routeAheadListen:
		s.link.aheadListens-- // an append forwarded ahead of its commit: internal, as before
	case routeTranscriptDelta:
		s.tx.streamed(o.Text, &s.inputAudio.speechItemID)
	case routeTranscript:
		s.responses.heard(o.Turn)
		// The utterance is over (its commit, or the engine's own VAD ended it): the speech a
		// later commit's overlap tier counts starts anew (overlap_commit.go).
		s.inputAudio.overlapSpeechMs = 0
		if s.tx.tracks(s.link.opts.TranscriptDeltas) {
			s.tx.transcriptArrived()
		}
		if s.settings.autoResponse() && o.Text != "" {
			it, evs := s.conv.commitAudio(s.inputAudio.takeSpeechID(), 0, s.m.cfg.WallClock(), s.epoch)
			s.tx.committed(it.ID)
			s.send(evs...)
			s.tx.completed(it.ID, duplex.Transcription{Text: o.Text, Logprobs: o.WordLogprobs})
			s.run(trimHistory{})
		}
	case routeListen:
		s.send(Event{Epoch: s.epoch, Effect: TurnDecision{SessionID: s.id, Epoch: s.epoch, Turn: o.Turn}})
	case routeTurnClosed:
		s.responses.closeTurn(o.Turn)
	case routeTurnFailed:
		// A turn that failed before a response was there to carry it (its prefill, or the
		// engine's reply ahead of its speak decision): no event to fail, but the failure is
		// logged and counted with its cause.
		s.link.obs.engineFailed(outputErrorCode(o.Err), o.Err, false, s.epoch)
		s.send(contextFailure(o.Err, s.epoch)...)
	case routeTruncated:
		s.run(s.conv.truncated(o.Truncated, s.responses.activeItemID(), s.epoch)...)
	case routeSpeak, routeResponse:
		s.turnOutput(o, p)
	}
	if reason := s.responses.settleListen(); reason != "" {
		s.send(listenEvent(s.id, s.epoch, s.input, reason))
	}
}

// turnOutput runs an output of the response's turn (p.route speak or response): the engine's
// end-of-turn estimate of a speak decision first, then the response, begun here when the plan
// says so, bound to the output's turn; a speak decision is told, other output goes to the
// response (onResponseOutput).
func (s *Session) turnOutput(o duplex.Output, p outputPlan) {
	if p.route == routeSpeak && o.EndOfTurn != nil {
		s.sem.engineEnded(o.EndOfTurn, &s.inputAudio)
	}
	r := s.responses.resp
	if p.begin {
		r = s.beginResponse(o.Turn, s.settings.cfg.replyOptions(s.settings.cfg.MaxOutputTokens))
	}
	if r == nil {
		return // the engine speaks, and this session does not answer by itself
	}
	r.turn.Bind(o.Turn)
	if p.route == routeSpeak {
		s.send(Event{Epoch: r.epoch, Model: true, Effect: TurnDecision{Speak: true, ResponseID: r.id, ItemID: r.itemID,
			SessionID: s.id, Epoch: r.epoch}})
		return
	}
	if o.Turn == r.turn.Engine() {
		s.onResponseOutput(r, o)
	}
}

// handleResult applies the outcome of an engine job on the actor: an item's transcript, the
// late result of a cancelled response (its turn fenced off), a failure (the response failed, or
// told), or the response's engine turn.
func (s *Session) handleResult(res jobResult) {
	s.jobQueue.taken()
	if res.consumed != "" {
		s.drainOutputs() // the engine's transcript of the utterance it ended may be queued: it goes first
		it, evs, listen := emptyCommit(&s.conv, &s.responses, &s.inputAudio, s.m.cfg.WallClock(), s.epoch, res.consumed)
		s.tx.committed(it.ID)
		s.send(evs...)
		s.tx.completed(it.ID, duplex.Transcription{})
		s.run(trimHistory{})
		if listen {
			s.send(listenEvent(s.id, s.epoch, s.input, res.consumed))
		}
		s.closeReason = s.timers.closeHold.settled(s.responses.resp != nil, s.closeReason)
		return
	}
	if res.itemID != "" && res.err == nil {
		s.tx.completed(res.itemID, res.transcript)
		s.run(trimHistory{})
	}
	r := s.responses.resp
	active := r != nil && res.responseID != "" && r.id == res.responseID
	switch {
	case res.responseID != "" && !active:
		// The response was cancelled while its job ran; make sure its turn stays fenced off.
		if s.responses.fenceLate(res) && s.link.engine != nil {
			stopCancelledTurn(s.link.engine, res.turn, requestclient.Fence{SessionID: s.id, Epoch: s.epoch})
		}
	case res.err != nil:
		s.tx.jobFailed(res.itemID, res.errCode, res.err, s.link.opts.TranscriptDeltas)
		msg := jobErrorMessage(res, s.link.obs, s.epoch)
		if active {
			s.run(failActive{r: r, code: res.errCode, msg: msg, err: res.err})
		} else {
			s.send(engineErrorEvent(s.epoch, res.errCode, msg, "", res.err))
		}
	case active && res.haveTurn:
		r.turn.Bind(res.turn)
	}
}

// jobErrorMessage is the client's message of a failed job res; an engine failure is logged and
// counted (obs) with its cause, which the message names. An empty commit is the client's
// mistake, not the engine's.
func jobErrorMessage(res jobResult, obs engineObserver, epoch int) string {
	if res.errCode == "input_audio_buffer_commit_empty" {
		return fmt.Sprintf("engine: %v", res.err)
	}
	return "engine: " + engineErrorMessage(res.err, obs.engineFailed(res.errCode, res.err, true, epoch))
}

// stopCancelledTurn stops the engine work of a response that was cancelled before its turn was
// known, without a client-visible event. Only that turn stops: a response the client started
// since may already be queued behind it in the engine.
func stopCancelledTurn(eng Engine, turn int, fence requestclient.Fence) {
	if tc, ok := eng.(TurnCanceller); ok {
		tc.CancelTurn(turn)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = eng.Signal(ctx, "response.cancel", fence)
}
