package session

import (
	"context"
	"fmt"
	"time"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
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

func (s *Session) routeOutput(o duplex.Output) {
	if o.Kind == duplex.OutError && o.Turn < 0 {
		cause := s.engineFailed("runtime_append_failed", o.Err, true)
		s.send(engineErrorEvent(s.epoch, "runtime_append_failed", engineErrorMessage(o.Err, cause), "", o.Err))
		return
	}
	if o.Kind == duplex.OutDecision && o.Decision == duplex.DecisionListen && s.aheadListens > 0 {
		s.aheadListens-- // an append forwarded ahead of its commit: internal, as before
		return
	}
	if o.Kind == duplex.OutTranscriptDelta {
		if o.Text == "" {
			s.tx.reached("", false) // a discard's mark
			return
		}
		s.tx.delta(o.Text, &s.inputAudio.speechItemID)
		return
	}
	if o.Kind == duplex.OutTranscript && s.tx.tracks(s.engineOpts.TranscriptDeltas) {
		s.tx.transcriptArrived()
	}
	if o.Kind == duplex.OutTranscript {
		if s.settings.autoResponse() && o.Text != "" {
			it := s.commitUserAudioItem(0)
			s.emitTranscript(it.ID, duplex.Transcription{Text: o.Text, Logprobs: o.WordLogprobs})
		}
		return
	}
	if s.responses.over(o.Turn) {
		return // a turn that is already over: cancelled or done
	}
	r := s.responses.resp
	turnOutput := o.Kind != duplex.OutDecision || o.Decision == duplex.DecisionSpeak
	if r != nil && turnOutput && r.turn.Engine() >= 0 && o.Turn > r.turn.Engine() {
		// The engine moved to a newer turn while this response was open (auto-response handoff):
		// the old response ends as completed with what was sent.
		r.frames = nil
		r.finished = true
		s.completeResponse(r)
		r = nil
	}
	if o.Kind == duplex.OutDecision {
		switch o.Decision {
		case duplex.DecisionListen:
			if r == nil {
				s.send(Event{Epoch: s.epoch, Effect: TurnDecision{SessionID: s.id, Epoch: s.epoch, Turn: o.Turn}})
			}
		case duplex.DecisionSpeak:
			if o.EndOfTurn != nil {
				s.sem.engineEnded(o.EndOfTurn, &s.inputAudio)
			}
			if r == nil && s.settings.autoResponse() {
				r = s.beginResponse(o.Turn, s.settings.cfg.replyOptions(s.settings.cfg.MaxOutputTokens))
			}
			if r != nil {
				r.turn.Bind(o.Turn)
				s.send(Event{Epoch: r.epoch, Model: true, Effect: TurnDecision{Speak: true, ResponseID: r.id, ItemID: r.itemID,
					SessionID: s.id, Epoch: r.epoch}})
			}
		}
		return
	}
	if r == nil {
		if !s.settings.autoResponse() || o.Kind == duplex.OutFinished || o.Kind == duplex.OutError || o.Kind == duplex.OutUsage {
			switch o.Kind {
			case duplex.OutFinished:
				s.responses.closeTurn(o.Turn)
			case duplex.OutError:
				// A turn that failed before a response was there to carry it (its prefill, or
				// the engine's reply ahead of its speak decision): no event to fail, but the
				// failure is logged and counted with its cause.
				s.engineFailed(outputErrorCode(o.Err), o.Err, false)
			}
			return
		}
		r = s.beginResponse(o.Turn, s.settings.cfg.replyOptions(s.settings.cfg.MaxOutputTokens))
	}
	r.turn.Bind(o.Turn)
	if o.Turn != r.turn.Engine() {
		return
	}
	s.onResponseOutput(r, o)
}

// emitTranscript records the user audio item's transcript and, with input transcription on,
// sends conversation.item.input_audio_transcription.completed, with its words' logprobs while
// include asks for them and the engine gave them. The item itself was added and done at its
// commit (its transcript was null then, as OpenAI sends it).
func (s *Session) emitTranscript(itemID string, tr duplex.Transcription) {
	text := tr.Text
	it := s.conv.find(itemID)
	if it != nil {
		it.Transcript = text
	}
	// Late deltas of the item are stale from here on, also when no transcript is sent.
	s.tx.finishDeltas(itemID, text)
	if !s.settings.cfg.Transcription {
		s.trimHistory()
		return
	}
	done := Transcription{Phase: PhaseCompleted, ItemID: itemID, Text: text}
	if s.settings.cfg.TranscriptLogprobs && tr.Logprobs != nil {
		toks := audio.TranscriptTokens(tr.Logprobs, true)
		done.Logprobs = &toks
	}
	if it != nil {
		secs := it.AudioMs / 1000
		done.AudioSeconds = &secs
	}
	s.send(Event{Epoch: s.epoch, Effect: done})
	s.tx.record(itemID, it, metrics.ItemCompleted, "", tr.RecognizerCPU)
	s.trimHistory()
}

// handleResult applies the outcome of an engine job on the actor.
func (s *Session) handleResult(res jobResult) {
	s.jobQueue.taken()
	if res.itemID != "" && res.err == nil {
		s.emitTranscript(res.itemID, res.transcript)
	}
	r := s.responses.resp
	active := r != nil && res.responseID != "" && r.id == res.responseID
	if res.responseID != "" && !active {
		// The response was cancelled while its job ran; make sure its turn stays fenced off.
		if res.haveTurn && !s.responses.over(res.turn) {
			s.responses.closeTurn(res.turn)
			if s.engine != nil {
				stopCancelledTurn(s.engine, res.turn, requestclient.Fence{SessionID: s.id, Epoch: s.epoch})
			}
		}
		return
	}
	if res.err != nil {
		if res.itemID != "" && s.tx.tracks(s.engineOpts.TranscriptDeltas) {
			s.tx.reached(res.itemID, true)
		}
		if res.itemID != "" && s.settings.opts.Transcription {
			s.tx.failed(res.itemID, res.errCode, fmt.Sprintf("engine: %v", res.err))
		}
		msg := fmt.Sprintf("engine: %v", res.err)
		if res.errCode != "input_audio_buffer_commit_empty" { // the client's mistake, not the engine's
			msg = "engine: " + engineErrorMessage(res.err, s.engineFailed(res.errCode, res.err, true))
		}
		if active {
			s.failResponse(r, res.errCode, msg, res.err)
		} else {
			s.send(engineErrorEvent(s.epoch, res.errCode, msg, "", res.err))
		}
		return
	}
	if active && res.haveTurn {
		r.turn.Bind(res.turn)
	}
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
