package session

import (
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"
)

// A transcription session (?intent=transcription; OpenAI's "realtime transcription") is a
// session whose committed audio is transcribed and never answered: the same input path (format
// decoding, noise reduction, VAD, the buffer, commit) and the same engine ASR as a conversation,
// with no response.* ever. Its session object is realtime.transcription_session; beta clients
// get transcription_session.created / .updated.

// transcriptionUpdateError refuses what a transcription session cannot take: a switch of the
// session type either way, turning transcription off, and the conversation-only fields.
func (s *Session) transcriptionUpdateError(p ConfigPatch) *FieldError {
	if !s.opts.Transcription {
		if p.Type != nil && *p.Type == "transcription" {
			return &FieldError{"invalid_value", "session.type",
				"A conversation session cannot become a transcription session: connect with ?intent=transcription (and no model)."}
		}
		return nil
	}
	if p.Type != nil && *p.Type != "transcription" {
		return &FieldError{"invalid_value", "session.type",
			fmt.Sprintf("This is a transcription session (?intent=transcription): session.type must be \"transcription\", not %q.", *p.Type)}
	}
	if p.TranscriptionSet && !p.Transcription {
		return &FieldError{"invalid_value", "session.audio.input.transcription",
			"A transcription session transcribes: audio.input.transcription cannot be null."}
	}
	conversationOnly := []struct {
		set   bool
		param string
	}{
		{p.Instructions != nil, "session.instructions"},
		{p.Voice != nil, "session.audio.output.voice"},
		{p.OutputFormat != nil, "session.audio.output.format"},
		{p.Modalities != nil, "session.output_modalities"},
		{p.MaxOutputTokens != nil, "session.max_output_tokens"},
		{p.ToolsSet, "session.tools"},
		{p.ToolChoice != nil, "session.tool_choice"},
		{p.Temperature != nil, "session.temperature"},
	}
	for _, f := range conversationOnly {
		if f.set {
			return &FieldError{"unknown_parameter", f.param,
				fmt.Sprintf("Unknown parameter: '%s'. A transcription session has no responses.", f.param)}
		}
	}
	return nil
}

// refuseInTranscription answers a client event that only a conversation has; it reports
// whether it did.
func (s *Session) refuseInTranscription(eventID, kind string) bool {
	if !s.opts.Transcription {
		return false
	}
	s.sendError("invalid_value", fmt.Sprintf("%s is not accepted in a transcription session: it transcribes committed audio and never responds (connect without ?intent=transcription for a conversation).", kind), eventID, "type")
	return true
}

// sessionEventName is session.created / session.updated, or the transcription_session.*
// spelling for a beta transcription session and for an update sent as
// transcription_session.update.
func (s *Session) sessionEventName(suffix string, legacy bool) string {
	if s.opts.Transcription && (s.opts.Beta || legacy) {
		return "transcription_session." + suffix
	}
	return "session." + suffix
}

// transcriptionSession is the effective realtime.transcription_session object (GA shape, or
// the beta one), plus the omniserve extensions a client may need (resume, idle timeout).
func (s *Session) transcriptionSession() map[string]any {
	var td any
	if w := s.cfg.TurnDetection.Wire(); w != nil {
		delete(w, "create_response")
		delete(w, "interrupt_response")
		td = w
	}
	sess := map[string]any{
		"id": s.id, "object": "realtime.transcription_session", "expires_at": s.expiresAt.Unix(), "include": nil,
		// omniserve extensions
		"idle_timeout_s": s.cfg.IdleTimeout.Seconds(), "state": s.state,
		"capabilities": map[string]any{"supports_session_resume": s.Resumable()},
	}
	if s.opts.Beta {
		sess["input_audio_format"] = betaFormat(s.cfg.InputFormat)
		sess["input_audio_transcription"] = s.transcriptionWire()
		sess["input_audio_noise_reduction"] = s.noiseReductionWire()
		sess["turn_detection"] = td
		sess["modalities"] = []string{"text"}
		return sess
	}
	sess["type"] = "transcription"
	sess["audio"] = map[string]any{"input": map[string]any{"format": wireFormat(s.cfg.InputFormat),
		"transcription": s.transcriptionWire(), "noise_reduction": s.noiseReductionWire(), "turn_detection": td,
		"sample_rate_hz": s.cfg.InputFormat.Rate}}
	return sess
}

// sendTranscriptionFailed reports a committed item that could not be transcribed.
func (s *Session) sendTranscriptionFailed(itemID, code, message string) {
	s.send(Event{Type: "conversation.item.input_audio_transcription.failed", Epoch: s.epoch, Fields: map[string]any{
		"item_id": itemID, "content_index": 0,
		"error": map[string]any{"type": "transcription_error", "code": code, "message": message, "param": nil}}})
}

// transcriptDeltas is what a transcription session has sent of the open utterance's
// transcript: the item the deltas named, and their text.
type transcriptDeltas struct {
	sent  string
	final bool // the final transcript went out: later deltas of the item are stale
}

// sendTranscriptDelta sends words the recognizer settled on while the user speaks. They belong
// to the first utterance end still ahead of them in the engine's outputs (txCuts): a committed
// item, or discarded audio (dropped). With none ahead they are the open utterance's: the item
// speech_started announced, or one reserved now (the commit takes it, as it takes
// speech_started's).
func (s *Session) sendTranscriptDelta(text string) {
	if !s.opts.Transcription || text == "" {
		return
	}
	var target string
	if len(s.txCuts) > 0 {
		if target = s.txCuts[0]; target == "" {
			return // of audio input_audio_buffer.clear discarded
		}
	} else {
		if s.speechItemID == "" || s.findItem(s.speechItemID) != nil {
			s.speechItemID = newItemID()
		}
		target = s.speechItemID
	}
	if s.tdeltas == nil {
		s.tdeltas = map[string]*transcriptDeltas{}
	}
	d := s.tdeltas[target]
	if d == nil {
		d = &transcriptDeltas{}
		s.tdeltas[target] = d
	}
	if d.final {
		return
	}
	d.sent += text
	s.send(Event{Type: "conversation.item.input_audio_transcription.delta", Epoch: s.epoch, Fields: map[string]any{
		"item_id": target, "content_index": 0, "delta": text}})
}

// txCut records an utterance end sent to the engine: the committed item's id, or "" for a
// discard.
func (s *Session) txCut(itemID string) {
	if s.opts.Transcription {
		s.txCuts = append(s.txCuts, itemID)
	}
}

// txCutReached takes an utterance end off txCuts: the first one, once the engine's outputs
// reached it (a Transcript output for an item, a discard's mark for ""), or a failed commit's
// item wherever it is (it has no output).
func (s *Session) txCutReached(itemID string, failed bool) {
	for i, id := range s.txCuts {
		if id == itemID {
			s.txCuts = slices.Delete(s.txCuts, i, i+1)
			break
		}
		if !failed {
			break
		}
	}
	if d := s.tdeltas[itemID]; itemID != "" && (failed || d != nil && d.final) {
		delete(s.tdeltas, itemID)
	}
}

// dropOpenDeltas forgets the open utterance's deltas (its audio was discarded); the next
// utterance gets a new item id.
func (s *Session) dropOpenDeltas() {
	if s.opts.Transcription && s.speechItemID != "" && s.findItem(s.speechItemID) == nil {
		delete(s.tdeltas, s.speechItemID)
		s.speechItemID = ""
	}
}

// finishTranscriptDeltas sends the rest of the item's final transcript as its last delta,
// so that the deltas concatenate to it; when the final pass revised words already sent, the
// deltas stop where they are and completed carries the final text (clients replace on
// completed). An item with no delta gets its whole transcript as one.
func (s *Session) finishTranscriptDeltas(itemID, final string) {
	sent := ""
	if d := s.tdeltas[itemID]; d != nil {
		sent = d.sent
	}
	if slices.Contains(s.txCuts, itemID) {
		// Deltas of it may still be on their way (ahead of its Transcript output): stale.
		if s.tdeltas == nil {
			s.tdeltas = map[string]*transcriptDeltas{}
		}
		s.tdeltas[itemID] = &transcriptDeltas{final: true}
	} else {
		delete(s.tdeltas, itemID)
	}
	if !strings.HasPrefix(final, sent) {
		return
	}
	if rest := final[len(sent):]; rest != "" {
		s.send(Event{Type: "conversation.item.input_audio_transcription.delta", Epoch: s.epoch, Fields: map[string]any{
			"item_id": itemID, "content_index": 0, "delta": rest}})
	}
}

// TranscriptionMetrics is implemented by metrics that time transcription session items
// (metrics.Collectors: omniserve_realtime_transcription_latency_seconds).
type TranscriptionMetrics interface {
	ObserveTranscription(seconds float64)
}

// observeTranscription records one transcribed item: Prometheus, and with --log-stats a line
// with the item's figures (a transcription item has no response, so no turn tables).
func (m *Manager) observeTranscription(it *item, seconds float64, log *zap.Logger) {
	if tm, ok := m.cfg.Metrics.(TranscriptionMetrics); ok {
		tm.ObserveTranscription(seconds)
	}
	if m.cfg.LogStats {
		log.Info("transcription item", zap.String("item_id", it.ID), zap.Float64("audio_ms", it.AudioMs),
			zap.Float64("commit_to_transcript_ms", seconds*1000), zap.Int("transcript_chars", len(it.Transcript)))
	}
}
