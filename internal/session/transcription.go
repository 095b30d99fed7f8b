package session

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/protocol"
)

// A transcription session (?intent=transcription; OpenAI's "realtime transcription") is a
// session whose committed audio is transcribed and never answered: the same input path (format
// decoding, noise reduction, VAD, the buffer, commit) and the same engine ASR as a conversation,
// with no response.* ever. Its session object is realtime.transcription_session; beta clients
// get transcription_session.created / .updated.

// refuseInTranscription answers a client event that only a conversation has; it reports
// whether it did.
func (s *Session) refuseInTranscription(eventID, kind string) bool {
	if !s.opts.Transcription {
		return false
	}
	s.sendError("invalid_value", fmt.Sprintf("%s is not accepted in a transcription session: it transcribes committed audio and never responds (connect without ?intent=transcription for a conversation).", kind), eventID, "type")
	return true
}

// transcriptionSession is the effective realtime.transcription_session (protocol.Encode spells
// it beta for beta clients), plus the omniserve extensions a client may need (resume, idle
// timeout).
func (s *Session) transcriptionSession() *protocol.TranscriptionSession {
	return &protocol.TranscriptionSession{
		ID: s.id, Object: "realtime.transcription_session", Type: "transcription", ExpiresAt: s.expiresAt.Unix(),
		Audio: protocol.SessionAudio{Input: s.audioInput(true)}, Include: s.includeWire(),
		// omniserve extensions
		IdleTimeoutS: s.cfg.IdleTimeout.Seconds(), State: s.state,
		Capabilities: protocol.TranscriptionCapabilities{SupportsSessionResume: s.Resumable()},
	}
}

// syncTranscriptLogprobs makes the open engine stream's logprobs setting follow the session's,
// as a job: in wire order with the commits before and after the session.update, so an item
// carries logprobs exactly when the include in force at its commit asked.
func (s *Session) syncTranscriptLogprobs() {
	on := s.wantsLogprobs()
	if s.engine == nil || s.engineOpts.TranscriptLogprobs == on {
		return
	}
	setter, ok := s.engine.(transcriptLogprobSetter)
	if !ok {
		return
	}
	if !s.submitJob(job{run: func(ctx context.Context) jobResult {
		return jobResult{err: setter.SetTranscriptLogprobs(ctx, on), errCode: "runtime_append_failed"}
	}}) {
		s.log.Warn("transcript logprobs setting not queued: the engine queue is full", zap.Bool("on", on))
		return
	}
	s.engineOpts.TranscriptLogprobs = on
}

// transcriptLogprobsError refuses include logprobs where the recognizer has none (a remote
// ASR answers with text only): an error with its param, not completed events without them.
func transcriptLogprobsError(b Backend, next Config) *FieldError {
	if !next.TranscriptLogprobs {
		return nil
	}
	if b, ok := b.(transcriptLogprobBackend); ok && b.SupportsTranscriptLogprobs() {
		return nil
	}
	return &FieldError{"unsupported_value", "session.include",
		"item.input_audio_transcription.logprobs needs the local speech recognizer; this server's ASR gives no log probabilities."}
}

// sendTranscriptionFailed reports a committed item that could not be transcribed, and records
// it.
func (s *Session) sendTranscriptionFailed(itemID, code, message string) {
	s.send(Event{Epoch: s.epoch, Payload: protocol.TranscriptionFailed{ItemID: itemID,
		Error: protocol.TranscriptionError{Type: "transcription_error", Code: code, Message: message}}})
	s.recordTranscriptionItem(itemID, s.conv.find(itemID), metrics.ItemFailed, code, 0)
}

// tracksDeltas reports whether the engine stream sends transcript deltas, so that the session
// keeps their utterance ends (transcripts.cuts). It follows the stream, not the current
// setting: a stream opened with deltas keeps sending them after transcription is turned off,
// and those must still find their item (to be dropped).
func (s *Session) tracksDeltas() bool { return s.opts.Transcription || s.engineOpts.TranscriptDeltas }

// sendTranscriptDelta sends words the recognizer settled on while the user speaks, to the item
// they belong to (transcripts.ahead); with no utterance end ahead of them they are the open
// utterance's: the item speech_started announced, or one reserved now (the commit takes it, as
// it takes speech_started's). Conversation sessions send them only while input transcription
// is on (OpenAI sends none without it).
func (s *Session) sendTranscriptDelta(text string) {
	if !s.sendsTranscripts() || text == "" {
		return
	}
	target, ahead := s.tx.ahead()
	if ahead && target == "" {
		return // of audio input_audio_buffer.clear discarded
	}
	if !ahead {
		s.speechItemID = s.conv.freshID(s.speechItemID)
		target = s.speechItemID
	}
	if text = s.tx.add(target, text); text != "" {
		s.send(Event{Epoch: s.epoch, Payload: protocol.TranscriptionDelta{ItemID: target, Delta: text}})
		s.timeDelta(target)
	}
}

// txCut records an utterance end sent to the engine: the committed item's id, or "" for a
// discard.
func (s *Session) txCut(itemID string) {
	if s.tracksDeltas() {
		s.tx.cut(itemID)
	}
}

// dropOpenDeltas forgets the open utterance's deltas (its audio was discarded); the next
// utterance gets a new item id. In a transcription session the utterance, announced by
// speech_started or its deltas, is recorded as cancelled.
func (s *Session) dropOpenDeltas() {
	if s.tracksDeltas() && s.speechItemID != "" && s.conv.find(s.speechItemID) == nil {
		s.recordTranscriptionItem(s.speechItemID, nil, metrics.ItemCancelled, reasonCleared, 0)
		s.tx.drop(s.speechItemID)
		s.speechItemID = ""
	}
}

// reasonCleared is a cancelled item's reason when input_audio_buffer.clear dropped its audio.
const reasonCleared = "input_audio_buffer_cleared"

// cancelTranscriptionItems records, as cancelled with the session's close reason, every item
// of a transcription session that the close cut short: committed items whose transcript never
// came, then the utterance speech_started (or its deltas) announced but no commit took.
func (s *Session) cancelTranscriptionItems(reason string) {
	if !s.opts.Transcription {
		return
	}
	for len(s.tx.open) > 0 {
		id := s.tx.open[0]
		s.recordTranscriptionItem(id, s.conv.find(id), metrics.ItemCancelled, reason, 0)
	}
	if s.speechItemID != "" && s.conv.find(s.speechItemID) == nil {
		s.recordTranscriptionItem(s.speechItemID, nil, metrics.ItemCancelled, reason, 0)
		s.speechItemID = ""
	}
}

// finishTranscriptDeltas ends the item's deltas (transcripts.finish) and, while transcripts are
// sent, sends the rest of its final transcript as its last delta.
func (s *Session) finishTranscriptDeltas(itemID, final string) {
	if rest := s.tx.finish(itemID, final); rest != "" && s.sendsTranscripts() {
		s.send(Event{Epoch: s.epoch, Payload: protocol.TranscriptionDelta{ItemID: itemID, Delta: rest}})
		s.timeDelta(itemID)
	}
}

// timeDelta notes a delta sent for the item's statistics record (transcription sessions only:
// a conversation's items are recorded in its turns).
func (s *Session) timeDelta(itemID string) {
	if s.opts.Transcription {
		s.tx.sent(itemID, s.m.cfg.WallClock())
	}
}

// transcriptionMetrics is implemented by metrics that record transcription session items
// (metrics.Collectors: omniserve_realtime_transcription_* families).
type transcriptionMetrics interface {
	ObserveTranscriptionItem(metrics.TranscriptionItem)
}

// recordTranscriptionItem records a transcription session item that ended now (.completed or
// .failed was just sent, or it was cut short): one immutable metrics.TranscriptionItem,
// observed by Prometheus and, with --log-stats, logged as its table (or JSON record). it may
// be nil (an item the history trimmed, or a cancelled one never committed); code is the
// failure's code, or a cancelled item's reason; recognizer is the recognizer's CPU time on a
// completed item (0: not measured).
func (s *Session) recordTranscriptionItem(itemID string, it *item, outcome, code string, recognizer time.Duration) {
	if !s.opts.Transcription {
		return
	}
	committed := s.tx.closed(itemID)
	now := s.m.cfg.WallClock()
	times := s.tx.timing(itemID)
	rec := metrics.TranscriptionItem{ItemID: itemID, SessionID: s.id, Committed: now, Done: now,
		FirstDelta: times.first, Deltas: times.deltas, Outcome: outcome, Error: code,
		RecognizerMs: float64(recognizer) / float64(time.Millisecond)}
	if outcome == metrics.ItemCancelled {
		rec.Error, rec.Reason = "", code
		if !committed {
			rec.Committed = 0 // only spoken: no commit to measure from
		}
	}
	if it != nil {
		rec.AudioMs, rec.Transcript = it.AudioMs, it.Transcript
		if it.CommittedAt > 0 {
			rec.Committed = it.CommittedAt
		}
		// With turn detection on, the server VAD commits in the step that sends speech_stopped
		// (vad.go), so the commit is the speech end. A client's own commit under VAD is rare
		// and counted so too.
		if s.cfg.TurnDetection != nil {
			rec.SpeechEnd = rec.Committed
		}
	}
	if outcome != metrics.ItemCompleted {
		rec.Transcript = ""
	}
	if tm, ok := s.m.cfg.Metrics.(transcriptionMetrics); ok {
		tm.ObserveTranscriptionItem(rec)
	}
	if s.m.cfg.LogStats {
		metrics.LogTranscriptionItem(s.log, rec, s.m.cfg.StructuredStats)
	}
}
