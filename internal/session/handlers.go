package session

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/speech"
)

func (s *DuplexSession) handle(c Command) {
	switch c := c.(type) {
	case *UpdateSession:
		s.handleUpdate(c, false)
	case *AppendAudio:
		s.handleAppend(c)
	case *CommitInput:
		s.handleCommit(c.ID, c.ResponseCreate)
	case *ClearInput:
		s.clearInput(c.ID)
		s.send(Event{Type: "input_audio_buffer.cleared", Epoch: s.epoch, Fields: map[string]any{}})
	case *CreateResponse:
		s.handleCreateResponse(c)
	case *CancelResponse:
		if s.resp == nil {
			if c.ResponseID == "" {
				s.sendError("response_not_active", "there is no active response to cancel", c.ID, "")
			}
			return
		}
		if c.ResponseID != "" && c.ResponseID != s.resp.id {
			s.sendError("response_not_active", fmt.Sprintf("response %q is not active", c.ResponseID), c.ID, "response_id")
			return
		}
		s.cancelActive("client_cancelled", "client_cancelled", true)
	case *CreateItem:
		s.handleCreateItem(c)
	case *DeleteItem:
		if !s.removeItem(c.ItemID) {
			s.sendError("item_not_found", fmt.Sprintf("item %q does not exist", c.ItemID), c.ID, "item_id")
			return
		}
		s.send(Event{Type: "conversation.item.deleted", Epoch: s.epoch, Fields: map[string]any{"item_id": c.ItemID}})
	case *RetrieveItem:
		it := s.findItem(c.ItemID)
		if it == nil {
			s.sendError("item_not_found", fmt.Sprintf("item %q does not exist", c.ItemID), c.ID, "item_id")
			return
		}
		s.send(Event{Type: "conversation.item.retrieved", Epoch: s.epoch, Fields: map[string]any{"item": it.wire()}})
	case *TruncateItem:
		s.handleTruncate(c.ID, c.ItemID, c.ContentIndex, float64(c.AudioEndMs))
	case *ClearOutputAudio:
		rid := any(nil)
		if s.resp != nil {
			rid = s.resp.id
		}
		s.send(Event{Type: "output_audio_buffer.cleared", Epoch: s.epoch, Fields: map[string]any{"response_id": rid}})
		s.cancelActive("output_audio_buffer_clear", "output_audio_buffer_clear", true)
	case *CancelInput:
		s.clearInput(c.ID)
		s.send(Event{Type: "input_audio_buffer.cleared", Epoch: s.epoch, Fields: map[string]any{}})
		// §10 #4: the wire keeps the documented reason; only the logged reason is mapped (cancel).
		s.cancelActive("cancel", "barge_in", true)
	case *BargeIn:
		s.send(Event{Type: "overlap.decision", Epoch: s.epoch, Fields: map[string]any{
			"session_id": s.id, "epoch": s.epoch, "policy": s.cfg.OverlapPolicy(), "action": "barge_in", "reason": "client"}})
		s.cancelActive("barge_in", "barge_in", true)
	case *CloseSession:
		s.closeReason = ReasonClientClose
	case *Heartbeat:
		s.send(Event{Type: "session.heartbeat_ack", Epoch: s.epoch, Fields: map[string]any{"session_id": s.id}})
	case *PlaybackAck:
		s.handlePlaybackAck(c)
	default:
		s.sendError("unknown_event", fmt.Sprintf("unsupported event %q", c.Type()), c.EventID(), "type")
	}
}

func (s *DuplexSession) handleUpdate(c *UpdateSession, first bool) {
	next, err := c.Patch.Apply(s.cfg)
	if err == nil && !s.opts.Duplex && next.AutoResponse {
		err = &FieldError{"unsupported", "session.extra_body.auto_response", "auto_response needs the full-duplex endpoint (?duplex=1)"}
	}
	if err == nil && s.engine != nil && (next.AutoResponse != s.cfg.AutoResponse || next.Instructions != s.cfg.Instructions ||
		(next.TurnDetection == nil) != (s.cfg.TurnDetection == nil)) {
		err = &FieldError{"session_update_unsupported", "session", "auto_response, instructions and turn_detection cannot change once audio has reached the engine"}
	}
	if first {
		s.emitCreated(err == nil)
	}
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			s.sendError(fe.Code, fe.Message, c.ID, fe.Param)
		} else {
			s.sendError("invalid_request_error", err.Error(), c.ID, "")
		}
		return
	}
	s.cfg = next
	s.resetIdle()
	if !first {
		s.send(Event{Type: "session.updated", Epoch: s.epoch, Fields: map[string]any{"session": s.publicSession()}})
	} else {
		s.send(Event{Type: "session.updated", Epoch: s.epoch, Fields: map[string]any{"session": s.publicSession()}})
	}
}

func (s *DuplexSession) emitCreated(_ bool) {
	s.send(Event{Type: "session.created", Epoch: s.epoch, Fields: map[string]any{"session": s.publicSession()}})
}

func (s *DuplexSession) emitClosed(reason string) {
	s.send(Event{Type: "session.closed", Epoch: s.epoch, Fields: map[string]any{"session_id": s.id, "reason": reason}})
}

func (s *DuplexSession) publicSession() map[string]any {
	var td any
	if s.cfg.TurnDetection != nil {
		td = s.cfg.TurnDetection
	}
	fmtObj := func(f AudioFormat) map[string]any {
		t := "audio/pcm"
		switch f.Type {
		case "pcm_f32le":
			t = "audio/pcm_f32le"
		case "g711_ulaw":
			t = "audio/pcmu"
		case "g711_alaw":
			t = "audio/pcma"
		}
		return map[string]any{"type": t, "rate": f.Rate}
	}
	maxTok := any("inf")
	if s.cfg.MaxOutputTokens > 0 {
		maxTok = s.cfg.MaxOutputTokens
	}
	return map[string]any{
		"id": s.id, "object": "realtime.session", "type": "realtime", "model": s.cfg.Model,
		"modalities": s.cfg.Modalities, "output_modalities": s.cfg.Modalities,
		"instructions": s.cfg.Instructions, "voice": s.cfg.Voice,
		"input_audio_format": s.cfg.InputFormat.Type, "output_audio_format": s.cfg.OutputFormat.Type,
		"audio": map[string]any{
			"input":  map[string]any{"format": fmtObj(s.cfg.InputFormat), "sample_rate_hz": s.cfg.InputFormat.Rate, "turn_detection": td},
			"output": map[string]any{"format": fmtObj(s.cfg.OutputFormat), "voice": s.cfg.Voice},
		},
		"turn_detection": td, "idle_timeout_s": s.cfg.IdleTimeout.Seconds(),
		"max_response_output_tokens": maxTok, "overlap_policy": s.cfg.OverlapPolicy(),
		"duplex": s.opts.Duplex, "auto_response": s.autoResponse(), "state": s.state, "turn_state": s.turnState,
		"epoch": s.epoch, "turn": s.turnID,
		"extra_body": map[string]any{"auto_response": s.cfg.AutoResponse},
		"capabilities": map[string]any{"supports_barge_in": true, "supports_session_resume": false,
			"supports_audio_truncate": true, "chunk_period_ms": frameMs, "target_barge_in_latency_ms": 100, "barge_in_min_speech_ms": overlapMinSpeechMs,
			"max_output_lead_ms": s.m.cfg.MaxOutputLead.Milliseconds(), "full_duplex": s.opts.Duplex},
	}
}

func (s *DuplexSession) handleAppend(c *AppendAudio) {
	f := s.cfg.InputFormat
	if c.Format != nil {
		nf, err := NormalizeInputFormat(*c.Format)
		if err != nil {
			s.sendError("unsupported_audio_format", err.Error(), c.ID, "format")
			return
		}
		f = nf
	}
	pcm, err := DecodeInput(c.Data, f)
	if err != nil {
		s.sendError("bad_audio", err.Error(), c.ID, "audio")
		return
	}
	if len(pcm) == 0 {
		return
	}
	started, voiced := s.detectSpeech(pcm)
	if s.resp != nil && started && s.cfg.OverlapPolicy() == PolicyBargeIn {
		s.send(Event{Type: "overlap.decision", Epoch: s.epoch, Fields: map[string]any{
			"session_id": s.id, "epoch": s.epoch, "policy": PolicyBargeIn, "action": "barge_in", "reason": "speech"}})
		onset := s.onsetAt
		if s.cancelActive("turn_detected", "turn_detected", true) && onset > 0 {
			if m := turnStats(s.engine); m != nil {
				lat := s.m.cfg.WallClock() - onset
				s.safeHook("observe_barge_in", func() { m.ObserveBargeIn(lat) })
			}
		}
	}
	if !s.autoResponse() {
		if s.inputBytes+4*len(pcm) > s.m.cfg.MaxPendingInputBytes {
			s.sendError("input_backpressure", fmt.Sprintf("more than %d bytes of input are pending", s.m.cfg.MaxPendingInputBytes), c.ID, "audio")
			return
		}
		if len(s.inputBuf) == 0 {
			s.inputStartTS = s.m.cfg.WallClock()
		}
		s.inputBuf = append(s.inputBuf, pcm)
		s.inputBytes += 4 * len(pcm)
		if s.resp == nil {
			s.turnState = TurnUserSpeaking
		}
		s.forwardInput()
		return
	}
	if !s.ensureEngine(c.ID) {
		return
	}
	if voiced && s.engine != nil {
		// Stamp the turn's t0 at the first speech, not at server-side silence (§4.7.5 caveat):
		// the speech onset's own append when this append confirmed it (docs/STATS.md).
		at := s.m.cfg.WallClock()
		if started && s.onsetAt > 0 {
			at = s.onsetAt
		}
		s.safeHook("mark_turn_arrival", func() { s.engine.MarkTurnArrival(at) })
	}
	if err := s.engine.AppendAudio(s.engineCtx, pcm); err != nil {
		if errors.Is(err, ErrInputBackpressure) {
			s.sendError("input_backpressure", err.Error(), c.ID, "audio")
			return
		}
		s.sendError("runtime_append_failed", err.Error(), c.ID, "")
	}
}

// forwardInput streams the uncommitted input buffer into the engine ahead of the commit, so the
// ASR decodes while the user speaks and the commit pays only the final hypothesis. It forwards
// only while nothing could reorder it or change what it means: the engine is open (opening it
// would freeze session.update's engine settings), no response is active (input during a
// response stays buffered, as the overlap policies expect), no engine job is queued or running
// (appends go straight to the engine's FIFO and must not overtake a queued commit), and the
// engine can discard (input_audio_buffer.clear must make the ASR forget). Otherwise the chunks
// stay local and the commit job feeds them, as before.
func (s *DuplexSession) forwardInput() {
	if s.engine == nil || s.resp != nil || s.jobsOut > 0 || s.inputFwd >= len(s.inputBuf) {
		return
	}
	if _, ok := s.engine.(AudioDiscarder); !ok {
		return
	}
	if s.inputFwd == 0 {
		// The turn's metrics arrival is its first append (keep-first; the commit's stamp is later).
		s.safeHook("mark_turn_arrival", func() { s.engine.MarkTurnArrival(s.m.cfg.WallClock()) })
	}
	for s.inputFwd < len(s.inputBuf) {
		if err := s.engine.AppendAudio(s.engineCtx, s.inputBuf[s.inputFwd]); err != nil {
			// Backpressure or a closing engine: the rest stays local for the commit job, which
			// reports a lasting failure.
			s.log.Debug("forwarding input ahead of commit", zap.Error(err))
			return
		}
		s.inputFwd++
		s.aheadListens++
	}
}

// unforwardInput makes the engine forget the forwarded head of the input buffer; the buffer
// itself is kept (the next commit feeds all of it).
func (s *DuplexSession) unforwardInput(eventID string) {
	if s.inputFwd == 0 {
		return
	}
	s.inputFwd = 0
	d, ok := s.engine.(AudioDiscarder)
	if !ok {
		return
	}
	if err := d.DiscardAudio(s.engineCtx); err != nil {
		s.sendError("runtime_append_failed", err.Error(), eventID, "")
	}
}

// clearInput is input_audio_buffer.clear: the buffer and whatever of it the ASR has heard are
// dropped.
func (s *DuplexSession) clearInput(eventID string) {
	s.unforwardInput(eventID)
	s.inputBuf, s.inputBytes, s.inputStartTS = nil, 0, 0
	if m := turnStats(s.engine); m != nil {
		s.safeHook("clear_turn_input", m.ClearTurnInput)
	}
}

// handleCommit commits buffered input as a user item; with a response it precreates the
// response (response.created now, the metrics turn begins here) and runs the engine work as one
// ordered job: append → commit (transcript) → respond.
func (s *DuplexSession) handleCommit(eventID string, responseCreate *bool) bool {
	respond := s.autoResponse()
	if responseCreate != nil {
		respond = *responseCreate
	}
	if s.autoResponse() {
		// Input already streams into the engine; commit ends the utterance now. The transcript
		// comes back as a Transcript output, which creates the user item.
		if !s.ensureEngine(eventID) {
			return false
		}
		s.safeHook("mark_turn_arrival", func() { s.engine.MarkTurnArrival(s.m.cfg.WallClock()) })
		if m := turnStats(s.engine); m != nil {
			s.safeHook("mark_input_end", func() { m.MarkInputEnd(s.m.cfg.WallClock()) })
		}
		eng := s.engine
		if !s.submitJob(job{run: func(ctx context.Context) jobResult {
			_, err := eng.Commit(ctx, respond)
			if errors.Is(err, speech.ErrEmptyAudio) {
				return jobResult{err: err, errCode: "input_audio_buffer_empty"}
			}
			return jobResult{err: err, errCode: "runtime_append_failed"}
		}}) {
			s.sendError("input_backpressure", "too many pending commits", eventID, "")
			return false
		}
		return true
	}
	if len(s.inputBuf) == 0 {
		s.sendError("input_audio_buffer_empty", "the input audio buffer is empty", eventID, "")
		return false
	}
	if respond && s.resp != nil {
		s.sendError("response_already_active", "a response is already in progress", eventID, "")
		return false
	}
	if !s.ensureEngine(eventID) {
		return false
	}
	buf := s.inputBuf[s.inputFwd:] // the forwarded head is already in the engine's ASR
	started := s.inputStartTS
	s.inputBuf, s.inputBytes, s.inputFwd, s.inputStartTS = nil, 0, 0, 0
	it := s.addUserAudioItem()
	s.send(Event{Type: "input_audio_buffer.committed", Epoch: s.epoch, Fields: map[string]any{"previous_item_id": nil, "item_id": it.ID}})
	s.pendingIn++
	s.turnState = TurnUserCommitted
	// t0 is the first append of this input (keep-first: a forwarded append may have stamped it).
	s.safeHook("mark_turn_arrival", func() { s.engine.MarkTurnArrival(started) })
	if m := turnStats(s.engine); m != nil {
		s.safeHook("mark_input_end", func() { m.MarkInputEnd(s.m.cfg.WallClock()) })
	}
	var r *response
	maxTok := s.cfg.MaxOutputTokens
	if respond {
		r = s.beginResponse(-1, maxTok)
	}
	eng := s.engine
	itemID := it.ID
	j := job{run: func(ctx context.Context) jobResult {
		res := jobResult{itemID: itemID, errCode: "runtime_append_failed"}
		for _, pcm := range buf {
			if res.err = eng.AppendAudio(ctx, pcm); res.err != nil {
				return res
			}
		}
		if res.transcript, res.err = eng.Commit(ctx, false); res.err != nil {
			return res
		}
		if r != nil && !r.cancelled.Load() {
			res.turn, res.err = eng.Respond(ctx, maxTok)
			res.haveTurn = res.err == nil
			res.errCode = "runtime_respond_failed"
		}
		return res
	}}
	if r != nil {
		j.responseID = r.id
	}
	if !s.submitJob(j) {
		s.sendError("input_backpressure", "too many pending commits", eventID, "")
		if r != nil {
			s.failResponse(r, "input_backpressure", "too many pending commits")
		}
		return false
	}
	return true
}

func (s *DuplexSession) addUserAudioItem() *item {
	it := &item{ID: "item_" + uuid.New().String()[:8] + uuid.New().String()[:8], Role: "user", Type: "message", Status: "completed", Audio: true}
	s.items = append(s.items, it)
	s.sendItemAdded(it, s.epoch, false)
	return it
}

func (s *DuplexSession) handleCreateResponse(c *CreateResponse) {
	if c.Unsupported != "" {
		s.sendError("unsupported_native_response_options", fmt.Sprintf("response.%s is not supported per response; set it with session.update", c.Unsupported), c.ID, "response."+c.Unsupported)
		return
	}
	if s.resp != nil {
		s.sendError("response_already_active", "a response is already in progress", c.ID, "")
		return
	}
	if len(s.inputBuf) > 0 {
		t := true
		s.handleCommit(c.ID, &t)
		return
	}
	if s.pendingIn == 0 {
		s.sendError("response_create_without_input", "there is no committed input to respond to", c.ID, "")
		return
	}
	if !s.ensureEngine(c.ID) {
		return
	}
	maxTok := s.cfg.MaxOutputTokens
	if c.MaxOutputTokens != nil {
		maxTok = *c.MaxOutputTokens
	}
	r := s.beginResponse(-1, maxTok)
	eng := s.engine
	if !s.submitJob(job{responseID: r.id, run: func(ctx context.Context) jobResult {
		if r.cancelled.Load() {
			return jobResult{}
		}
		t, err := eng.Respond(ctx, maxTok)
		return jobResult{turn: t, haveTurn: err == nil, err: err, errCode: "runtime_respond_failed"}
	}}) {
		s.failResponse(r, "input_backpressure", "too many pending engine jobs")
	}
}

func (s *DuplexSession) handleCreateItem(c *CreateItem) {
	role := c.Role
	if role != "user" && role != "system" && role != "assistant" {
		s.sendError("invalid_value", fmt.Sprintf("unsupported item role %q", role), c.ID, "item.role")
		return
	}
	if !s.ensureEngine(c.ID) {
		return
	}
	id := c.ItemID
	if id == "" {
		id = "item_" + uuid.New().String()[:16]
	}
	if s.findItem(id) != nil {
		s.sendError("item_exists", fmt.Sprintf("item %q already exists", id), c.ID, "item.id")
		return
	}
	it := &item{ID: id, Role: role, Type: "message", Status: "completed", Text: c.Text}
	var pcm []float32
	if len(c.Audio) > 0 {
		var err error
		if pcm, err = DecodeInput(c.Audio, s.cfg.InputFormat); err != nil {
			s.sendError("bad_audio", err.Error(), c.ID, "item.content")
			return
		}
		it.Audio = true
		// The item is transcribed alone: take the buffer's forwarded audio back out of the ASR
		// (its commit feeds the whole buffer again).
		s.unforwardInput(c.ID)
	}
	s.items = append(s.items, it)
	s.sendItemAdded(it, s.epoch, false)
	s.send(Event{Type: "conversation.item.done", Epoch: s.epoch, Fields: map[string]any{"item": it.wire()}})
	if role == "user" {
		s.pendingIn++
		s.safeHook("mark_turn_arrival", func() { s.engine.MarkTurnArrival(s.m.cfg.WallClock()) })
	}
	eng := s.engine
	text := c.Text
	s.submitJob(job{run: func(ctx context.Context) jobResult {
		res := jobResult{itemID: id, errCode: "runtime_append_failed"}
		if len(pcm) > 0 {
			if res.err = eng.AppendAudio(ctx, pcm); res.err != nil {
				return res
			}
			res.transcript, res.err = eng.Commit(ctx, false)
			return res
		}
		res.err = eng.AppendText(ctx, role, text)
		return res
	}})
}

func (s *DuplexSession) handleTruncate(eventID, itemID string, contentIndex int, endMs float64) {
	it := s.findItem(itemID)
	if it == nil {
		s.sendError("item_not_found", fmt.Sprintf("item %q does not exist", itemID), eventID, "item_id")
		return
	}
	if it.Role != "assistant" || !it.Audio {
		s.sendError("invalid_value", "only assistant audio items can be truncated", eventID, "item_id")
		return
	}
	if s.resp != nil && s.resp.itemID == itemID {
		if endMs > s.resp.sentMs {
			s.sendError("invalid_value", fmt.Sprintf("audio_end_ms %.0f is beyond the %.0f ms sent", endMs, s.resp.sentMs), eventID, "audio_end_ms")
			return
		}
		s.resp.playedMs = endMs
		it.Text = s.resp.heardText()
	} else {
		if endMs > it.AudioMs {
			s.sendError("invalid_value", fmt.Sprintf("audio_end_ms %.0f is beyond the item's %.0f ms", endMs, it.AudioMs), eventID, "audio_end_ms")
			return
		}
		if it.AudioMs > 0 {
			// Proportional transcript truncation ("not word alignment"), as the reference does.
			rs := []rune(it.Text)
			it.Text = string(rs[:int(float64(len(rs))*endMs/it.AudioMs)])
		}
		it.AudioMs = endMs
	}
	s.send(Event{Type: "conversation.item.truncated", Epoch: s.epoch, Fields: map[string]any{
		"item_id": itemID, "content_index": contentIndex, "audio_end_ms": int(endMs)}})
}

func (s *DuplexSession) handlePlaybackAck(c *PlaybackAck) {
	r := s.resp
	if r == nil || (c.ResponseID != "" && c.ResponseID != r.id) || (c.ItemID != "" && c.ItemID != r.itemID) {
		s.sendError("playback_item_not_found", "no active response matches this playback.ack", c.ID, "response_id")
		return
	}
	played := math.Min(float64(c.PlayedMs), r.sentMs)
	r.playedMs = played
	s.send(Event{Type: "playback.acknowledged", Epoch: s.epoch, Fields: map[string]any{
		"response_id": r.id, "item_id": r.itemID, "played_ms": int(played), "sent_ms": int(r.sentMs)}})
	if c.Truncate {
		s.handleTruncate(c.ID, r.itemID, 0, played)
	}
}
