package session

import (
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/speech"
)

// overlapMinSpeechMs is the voiced time the overlap VAD needs before it reports speech (eight
// 30 ms frames). WebRTC VAD (mode 2, the default threshold 0.5) takes loud white noise for speech
// and its hangover stretches a burst: measured over 300 seeds × 3 bursts at random frame
// alignment, 50 ms bursts gave voiced runs of 120–180 ms and 100 ms bursts 180–210 ms (150 ms
// bursts 240–300 ms). 240 ms rejects every burst up to 100 ms; speech.DefaultMinSpeechMs (150)
// let most 50 ms bursts through. The cost is barge-in latency: 240 ms of speech after its onset.
const overlapMinSpeechMs = 240

// detectSpeech runs the session's WebRTC VAD over one decoded 16 kHz append and, under
// server_vad, emits speech_started / speech_stopped. started reports a SpeechStarted in this
// chunk (the overlap decision barges in on it: the VAD requires overlapMinSpeechMs of voiced
// frames, so a click or a short cough does not interrupt); voiced reports speech in this chunk
// at all (auto_response stamps the turn's t0 on it). The VAD runs under server_vad, and with
// turn_detection null only for auto_response's t0, silently and with the default settings.
func (s *DuplexSession) detectSpeech(pcm []float32) (started, voiced bool) {
	td := s.cfg.TurnDetection
	announce := td != nil
	if td == nil {
		if !s.autoResponse() {
			s.closeVAD()
			return false, false
		}
		td = DefaultTurnDetection()
	}
	if s.vad != nil && s.vadTD != *td {
		// session.update changed the VAD settings: the next segment uses the new ones.
		s.closeVAD()
	}
	if s.vad == nil {
		v, err := speech.NewVAD(speech.VADConfig{
			SampleRate: EngineRate, Threshold: td.Threshold, PrefixPaddingMs: td.PrefixPaddingMs,
			SilenceDurationMs: td.SilenceDurationMs, MinSpeechMs: overlapMinSpeechMs,
		})
		if err != nil {
			// Config validation keeps the threshold in range, so only allocation can fail here;
			// the session keeps working without barge-in on speech.
			s.log.Warn("creating the overlap vad", zap.Error(err))
			return false, false
		}
		s.vad, s.vadTD = v, *td
	}
	evs, err := s.vad.Process(pcm)
	if err != nil {
		s.log.Debug("overlap vad", zap.Error(err))
		return false, false
	}
	s.markVAD(len(pcm), td.PrefixPaddingMs, evs)
	for _, ev := range evs { // evs is reused by the next Process call: consumed here
		switch ev.Kind {
		case speech.SpeechStarted:
			voiced, started = true, true
			if announce && !s.inSpeech {
				s.inSpeech = true
				s.send(Event{Type: "input_audio_buffer.speech_started", Epoch: s.epoch, Fields: map[string]any{"audio_start_ms": 0, "item_id": nil}})
			}
		case speech.SpeechStopped:
			if s.inSpeech {
				s.inSpeech = false
				s.send(Event{Type: "input_audio_buffer.speech_stopped", Epoch: s.epoch, Fields: map[string]any{"audio_end_ms": 0, "item_id": nil}})
				if m := turnStats(s.engine); m != nil {
					s.safeHook("mark_input_end", func() { m.MarkInputEnd(s.m.cfg.WallClock()) })
				}
			}
		}
	}
	return started, voiced || s.vad.InSpeech()
}

// vadMark is one append as the VAD saw it.
type vadMark struct {
	endMs int64
	at    float64
}

// markVAD records the append that was just processed and, when it completed a SpeechStarted,
// sets onsetAt to the receipt time of the append holding the onset (the VAD confirms speech
// only after min speech; the turn's t0 is the onset, as speech_started reports it).
func (s *DuplexSession) markVAD(samples, prefixPaddingMs int, evs []speech.VADEvent) {
	now := s.m.cfg.WallClock()
	s.vadFed += int64(samples)
	copy(s.vadMarks[:], s.vadMarks[1:])
	s.vadMarks[len(s.vadMarks)-1] = vadMark{endMs: s.vadFed * 1000 / EngineRate, at: now}
	s.onsetAt = 0
	for _, ev := range evs {
		if ev.Kind != speech.SpeechStarted {
			continue
		}
		onset := ev.AtMs + int64(prefixPaddingMs) // AtMs has the prefix padding taken off
		s.onsetAt = now
		for _, m := range s.vadMarks {
			if m.at > 0 && m.endMs > onset {
				s.onsetAt = m.at
				break
			}
		}
	}
}

// resetVAD starts a response with a fresh detector, so only speech that begins during the
// response can barge in on it. A segment announced to the client is closed first: the VAD
// forgets it, and speech_started must not come twice without a speech_stopped between.
func (s *DuplexSession) resetVAD() {
	if s.vad == nil {
		return
	}
	if s.inSpeech {
		s.inSpeech = false
		s.send(Event{Type: "input_audio_buffer.speech_stopped", Epoch: s.epoch, Fields: map[string]any{"audio_end_ms": 0, "item_id": nil}})
	}
	s.vad.Reset()
	s.vadMarks, s.vadFed, s.onsetAt = [16]vadMark{}, 0, 0
}

// closeVAD frees the WebRTC instance (C memory the GC does not see); Run defers it so every exit
// path releases it.
func (s *DuplexSession) closeVAD() {
	if s.vad != nil {
		s.vad.Close()
		s.vad = nil
	}
	s.inSpeech = false
	s.vadMarks, s.vadFed, s.onsetAt = [16]vadMark{}, 0, 0
}
