package session

import (
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"

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
		Audio: protocol.SessionAudio{Input: s.audioInput(true)},
		// omniserve extensions
		IdleTimeoutS: s.cfg.IdleTimeout.Seconds(), State: s.state,
		Capabilities: protocol.TranscriptionCapabilities{SupportsSessionResume: s.Resumable()},
	}
}

// sendTranscriptionFailed reports a committed item that could not be transcribed.
func (s *Session) sendTranscriptionFailed(itemID, code, message string) {
	s.send(Event{Epoch: s.epoch, Payload: protocol.TranscriptionFailed{ItemID: itemID,
		Error: protocol.TranscriptionError{Type: "transcription_error", Code: code, Message: message}}})
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
		s.speechItemID = s.conv.freshID(s.speechItemID)
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
	s.send(Event{Epoch: s.epoch, Payload: protocol.TranscriptionDelta{ItemID: target, Delta: text}})
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
	if s.opts.Transcription && s.speechItemID != "" && s.conv.find(s.speechItemID) == nil {
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
		s.send(Event{Epoch: s.epoch, Payload: protocol.TranscriptionDelta{ItemID: itemID, Delta: rest}})
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
