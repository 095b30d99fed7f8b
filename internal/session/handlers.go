package session

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
)

// receive applies a client command from the inbox: its bytes leave the inbox's budget, the
// idle timeout restarts, and a beta client is recognised before the command is handled. The
// audio buffers' and the conversation's commands are dispatched by their own functions; the
// session's own commands are handled here. Every command's checks live in its handler.
func (s *Session) receive(c Command) {
	s.inboxB.release(commandBytes(c))
	resetTimer(s.timers.idle, s.settings.cfg.IdleTimeout)
	if s.timers.closeHold.reason != "" && !afterClose(c) {
		// session.close was the client's last word: what follows it is not applied.
		s.sendError("session_closing", fmt.Sprintf("%s after session.close: the session is closing", c.Type()), c.EventID(), "type")
		return
	}
	if s.settings.detectDialect(c) {
		s.log.Debug("beta client detected from its session.update fields")
	}
	if s.handleAudioCommand(c) || s.handleConversationCommand(c) {
		return
	}
	switch c := c.(type) {
	case *UpdateSession:
		s.handleUpdate(c)
	case *InputActivity:
		// The idle timeout restarted above; the input itself comes with its commit.
	case *CloseSession:
		if !s.timers.closeHold.hold(ReasonClientClose, func(reason string) {
			s.log.Info("no outcome of the commits before session.close in time; closing")
			s.Stop(reason)
		}) {
			s.closeReason = ReasonClientClose
		}
	case *Heartbeat:
		s.send(Event{Epoch: s.epoch, Effect: HeartbeatAck{SessionID: s.id}})
	case *SignalTurn:
		s.send(Event{Epoch: s.epoch, Effect: TurnSignaled{SessionID: s.id, Event: c.Event, TurnState: s.responses.turnState, Epoch: s.epoch}})
	default:
		s.sendError("unknown_event", fmt.Sprintf("unsupported event %q", c.Type()), c.EventID(), "type")
	}
}

// handleAudioCommand applies the commands about the input and output audio; false for any
// other.
func (s *Session) handleAudioCommand(c Command) bool {
	switch c := c.(type) {
	case *AppendAudio:
		s.run(appendAudio{c: c})
	case *CommitInput:
		s.handleCommit(c)
	case *ClearInput:
		s.run(clearInput{eventID: c.ID})
		s.send(Event{Epoch: s.epoch, Effect: InputCleared{}})
	case *CancelInput:
		s.run(clearInput{eventID: c.ID})
		s.send(Event{Epoch: s.epoch, Effect: InputCleared{}})
		// The wire keeps the documented reason (barge_in); only the logged reason is mapped
		// (cancel). The reference changed the wire reason too, which clients do not expect.
		s.run(cancelActive{source: "cancel", wire: "barge_in", notify: true})
	case *ClearOutputAudio:
		r := s.responses.resp
		s.run(cancelActive{source: "output_audio_buffer_clear", wire: "output_audio_buffer_clear", notify: true})
		if r == nil || !r.clearedAudio {
			rid := ""
			if r != nil {
				rid = r.id
			}
			s.send(Event{Epoch: s.epoch, Effect: AudioBuffer{Phase: PhaseCleared, ResponseID: rid}})
		}
	case *BargeIn:
		s.send(Event{Epoch: s.epoch, Effect: OverlapDecision{
			SessionID: s.id, Epoch: s.epoch, Policy: s.settings.cfg.OverlapPolicy(), Action: "barge_in", Reason: "client"}})
		s.run(cancelActive{source: "barge_in", wire: "barge_in", notify: true})
	case *PlaybackAck:
		s.send(s.responses.playbackAck(c, &s.conv, s.epoch)...)
	default:
		return false
	}
	return true
}

// handleConversationCommand applies the commands about responses and conversation items;
// false for any other.
func (s *Session) handleConversationCommand(c Command) bool {
	switch c := c.(type) {
	case *CreateResponse:
		s.handleCreateResponse(c)
	case *CancelResponse:
		if ev := s.responses.cancelRefusal(c, s.epoch); ev != nil {
			s.send(*ev)
			return true // handled: the client was told why not
		}
		s.run(cancelActive{source: "client_cancelled", wire: "client_cancelled", notify: true})
	case *CreateItem:
		s.handleCreateItem(c)
	case *DeleteItem:
		s.send(s.conv.deleteItem(c, s.epoch))
	case *RetrieveItem:
		s.send(s.conv.retrieveItem(c, s.epoch))
	case *TruncateItem:
		s.send(s.responses.truncate(&s.conv, s.epoch, c.ID, c.ItemID, c.ContentIndex, float64(c.AudioEndMs))...)
	default:
		return false
	}
	return true
}

// nextConfig is the configuration patch makes of st's, or the refusal: the settings' own
// checks (settings.next), then those that ask the server m (the instructions' length in the
// model's context, the MCP allow-list) or the engine (engineOpen: audio reached it). It
// changes nothing but the model's naming (settings.resolveModel).
func nextConfig(st *settings, m *Manager, engineOpen bool, patch ConfigPatch) (Config, error) {
	// The tools are measured before their schemas are checked one by one (a grammar each): a
	// declaration that cannot fit the window costs no more than reading its size.
	if fe := admitPatchTools(newAdmitRule(m, st.cfg), patch); fe != nil {
		return st.cfg, fe
	}
	next, err := st.next(patch, m, m.cfg.MaxIdleTimeout)
	if err == nil && next.Instructions != st.cfg.Instructions {
		if fe := checkInstructions(next.Instructions, "session.instructions", m.cfg.MaxInstructionsBytes, m.backend); fe != nil {
			err = fe
		}
	}
	if err == nil && patch.ToolsSet {
		if fe := checkMCPTools(patch.MCPTools, m.cfg.MCPAllowList); fe != nil {
			err = fe
		}
	}
	if err == nil {
		if fe := checkMCPChoice(next); fe != nil {
			err = fe
		}
	}
	if err == nil {
		if fe := transcriptLogprobsError(m.backend, next); fe != nil {
			err = fe
		}
	}
	if err == nil && engineOpen && st.autoResponse() != st.autoResponseFor(next) {
		err = &FieldError{"session_update_unsupported", "session.audio.input.turn_detection",
			"on ?duplex=1, create_response (auto_response) cannot change once audio has reached the engine"}
	}
	return next, err
}

func (s *Session) handleUpdate(c *UpdateSession) {
	if c.Transcription && !s.settings.opts.Transcription {
		s.sendError("invalid_value", "transcription_session.update is for transcription sessions (?intent=transcription); this is a conversation: use session.update.", c.ID, "type")
		return
	}
	next, err := nextConfig(&s.settings, s.m, s.link.engine != nil, c.Patch)
	if err != nil {
		// A failed update changes nothing.
		var fe *FieldError
		if errors.As(err, &fe) {
			s.sendError(fe.Code, fe.Message, c.ID, fe.Param)
		} else {
			s.sendError("invalid_request_error", err.Error(), c.ID, "")
		}
		return
	}
	instructionsChanged := next.Instructions != s.settings.cfg.Instructions
	s.settings.cfg = next
	if err := s.inputAudio.setNoiseReduction(s.settings.cfg.NoiseReduction); err != nil {
		// The configuration was validated: only a broken speex library gets here.
		s.log.Error("noise reduction unavailable", zap.Error(err))
	}
	resetTimer(s.timers.idle, s.settings.cfg.IdleTimeout)
	if s.link.stale(openOptions(&s.settings, s.m.cfg.MaxHistoryBytes), s.responses.resp != nil || s.jobQueue.jobsOut > 0) {
		instructionsChanged = false // the new stream is opened with them
		s.link.closeStale()
		// Close returns after the stream's last output: route what it queued (listen decisions
		// of the forwarded chunks), then forget the ones it never sent.
		s.drainOutputs()
		if s.tx.tracks(s.link.opts.TranscriptDeltas) {
			s.tx.reopened(s.inputAudio.speechItemID) // the new stream repeats the open utterance's words
		}
		s.link.forget(&s.inputAudio)
		if len(s.inputAudio.inputBuf) > 0 { // else the next append opens the new stream
			busy := s.responses.resp != nil || s.jobQueue.jobsOut > 0
			s.run(openAhead{}, forwardAhead{in: &s.inputAudio, turn: s.input, busy: busy, wall: s.m.cfg.WallClock()})
		}
	}
	s.link.opts.TranscriptLogprobs = s.tx.syncLogprobs(s.link.engine, s.link.opts.TranscriptLogprobs)
	syncTruncation(&s.link, s.settings.cfg.Truncation, s.submitJob, s.log)
	if instructionsChanged && s.link.engine != nil {
		// The engine stream was opened with the old instructions: the new ones join the
		// conversation as a system message, in wire order with the input around them.
		eng, text, turn := s.link.engine, next.Instructions, s.input
		s.submitJob(job{run: func(ctx context.Context) jobResult {
			return jobResult{err: eng.AppendText(ctx, turn, "system", text), errCode: "runtime_append_failed"}
		}})
	}
	s.tools.sync(s.settings.cfg)
	s.send(Event{Epoch: s.epoch, Effect: sessionUpdated(sessionView(&s.settings, s.m.cfg, sessionFacts{s.id, s.expiresAt, s.state, s.epoch, &s.responses}), &s.settings, c.Transcription)})
	s.tools.syncMCP(s.settings.cfg.MCP, s.m.cfg.MCPLimits, s.epoch)
}

// newClientItem opens the engine for a client's new item and settles its id (the client's,
// or a fresh one); false when the client was already told why not.
func (s *Session) newClientItem(c *CreateItem) (string, bool) {
	if !s.ensureEngine(c.ID) {
		return "", false
	}
	id := c.ItemID
	if id == "" {
		id = newItemID()
	}
	if s.conv.find(id) != nil {
		s.sendError("item_exists", fmt.Sprintf("item %q already exists", id), c.ID, "item.id")
		return "", false
	}
	return id, true
}

// handleCreateItem is conversation.item.create: a tool item goes to the tool state; a message
// is checked, added to the item list and handed to the engine in wire order.
func (s *Session) handleCreateItem(c *CreateItem) {
	if s.tx.refuse(c.ID, "conversation.item.create") {
		return
	}
	if handled, f := s.tools.createItem(c, &s.responses, s.epoch); handled {
		if f != nil {
			s.run(startFollowUp{f: *f})
		}
		return
	}
	role := c.Role
	if !validRole(role) {
		s.sendError("invalid_value", fmt.Sprintf("unsupported item role %q", role), c.ID, "item.role")
		return
	}
	// Measured in tokens before the engine is opened for it, acknowledged or queued
	// (admission.go); its tokens join the budget below, once nothing else can refuse it.
	rule := newAdmitRule(s.m, s.settings.cfg)
	tokens, fe := 0, (*FieldError)(nil)
	if len(c.Audio) == 0 {
		tokens, fe = measureText(rule, textParam(c), role, c.Text)
	}
	if fe != nil {
		s.sendError(fe.Code, fe.Message, c.ID, fe.Param)
		return
	}
	id, ok := s.newClientItem(c)
	if !ok {
		return
	}
	if !s.conv.hasPrevious(c.PreviousItemID) {
		s.sendError("invalid_value", fmt.Sprintf("previous_item_id %q does not exist", c.PreviousItemID), c.ID, "previous_item_id")
		return
	}
	it := &item{ID: id, Role: role, Type: "message", Status: "completed", Text: c.Text}
	pcm, fe := itemAudio(c, s.settings.cfg.InputFormat)
	if fe != nil {
		s.sendError(fe.Code, fe.Message, c.ID, fe.Param)
		return
	}
	if len(c.Audio) > 0 {
		it.Audio = true
		// The item is transcribed alone: take the buffer's forwarded audio back out of the ASR
		// (its commit feeds the whole buffer again).
		s.run(unforward{eventID: c.ID})
	}
	if !s.jobQueue.canSubmitJob() {
		// Refuse before the acknowledgement: an item the client saw added must reach the engine.
		s.sendError("input_backpressure", "too many pending engine jobs; the item was not added", c.ID, "item")
		return
	}
	if fe := s.link.budget.take(rule, textParam(c), tokens); fe != nil {
		s.sendError(fe.Code, fe.Message, c.ID, fe.Param)
		return
	}
	// The item takes its place in the item list; the engine's context is append-only, so the
	// model reads it after everything before it in time (documented in docs/REALTIME.md).
	s.conv.insert(it, c.PreviousItemID)
	s.send(s.conv.added(it, s.epoch, false))
	s.send(s.conv.done(it, s.epoch, false))
	s.run(trimHistory{})
	if role == "user" {
		s.responses.pendingIn++
		s.link.engine.MarkTurnArrival(s.input, s.m.cfg.WallClock())
	}
	if len(pcm) > 0 {
		s.tx.endUtterance(id, s.link.opts.TranscriptDeltas) // the item's audio is an utterance of its own: its deltas name it
	}
	s.submitJob(appendItemJob(s.link.engine, s.input, id, c, pcm)) // cannot fail: canSubmitJob above
}

// validRole reports whether a message item may have role.
func validRole(role string) bool {
	return role == "user" || role == "system" || role == "assistant"
}

// itemAudio decodes a client item's audio in the session's input format (nil when it has
// none); the refusal names the bad field.
func itemAudio(c *CreateItem, format AudioFormat) ([]float32, *FieldError) {
	if len(c.Audio) == 0 {
		return nil, nil
	}
	pcm, err := DecodeInput(c.Audio, format)
	if err != nil {
		return nil, &FieldError{Code: "bad_audio", Param: "item.content", Message: err.Error()}
	}
	return pcm, nil
}

// appendItemJob is the engine job of a client's item: its audio appended and committed (its
// transcript comes back with the result), or its text appended with its role.
func appendItemJob(eng Engine, turn int, id string, c *CreateItem, pcm []float32) job {
	role, text := c.Role, c.Text
	return job{run: func(ctx context.Context) jobResult {
		res := jobResult{errCode: "runtime_append_failed"}
		if len(pcm) > 0 {
			res.itemID = id // only audio items get a transcript
			if res.err = eng.AppendAudio(ctx, turn, pcm); res.err != nil {
				return res
			}
			res.transcript, res.err = eng.Commit(ctx, turn, false)
			return res
		}
		res.err = eng.AppendText(ctx, turn, role, text)
		return res
	}}
}
