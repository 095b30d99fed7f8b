package session

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/speech"
)

// overlapMinSpeechMs is the voiced time the overlap VAD needs before it reports speech (eight
// 30 ms frames). WebRTC VAD (mode 2, the default threshold 0.5) takes loud white noise for speech
// and its hangover stretches a burst: measured over 300 seeds × 3 bursts at random frame
// alignment, 50 ms bursts gave voiced runs of 120–180 ms and 100 ms bursts 180–210 ms (150 ms
// bursts 240–300 ms). 240 ms rejects every burst up to 100 ms; speech.DefaultMinSpeechMs (150)
// let most 50 ms bursts through. The cost is barge-in latency: 240 ms of speech after its onset.
const overlapMinSpeechMs = 240

// overlapEarlySpeechMs is the voiced time that suffices when the run carries a voice's pitch
// (speech.VADConfig.EarlySpeechMs): white noise has none, and a tone burst of up to 100 ms
// cannot complete it, so the noise rejection above holds while real speech is confirmed
// 0–90 ms sooner (measured on four pocketsphinx clips; internal/speech TestVADEarlySpeech).
const overlapEarlySpeechMs = 150

// vadResult is what one append did to the speech segmentation.
type vadResult struct {
	started bool // a segment opened in this append (speech_started)
	stopped bool // a segment closed in this append (speech_stopped)
	voiced  bool // speech anywhere in this append, or a segment still open
}

// detectSpeech runs the session's WebRTC VAD over one decoded 16 kHz append and, under
// server_vad, emits speech_started / speech_stopped with their positions in the session's input
// audio (audio_start_ms includes prefix_padding_ms, audio_end_ms the silence window, as OpenAI
// reports them) and the id the user item will get on commit. started feeds the overlap decision
// (the VAD requires overlapMinSpeechMs of voiced frames, or overlapEarlySpeechMs of pitched
// ones, so a click, a noise burst or a short cough does not interrupt); voiced lets auto_response stamp the turn's t0. With turn_detection null the VAD
// runs only for auto_response's t0, silently and with the default settings. Call it after
// s.inputMs counts pcm.
func (s *Session) detectSpeech(pcm []float32) vadResult {
	// The VAD hears the input without the echo of what the session itself sent: a client
	// without echo cancellation must not barge in on its own assistant. The canceller's clock
	// advances with every append, whether a VAD runs or not.
	if s.echo != nil {
		pcm = s.echo.Process(pcm)
	}
	td := s.cfg.TurnDetection
	announce := td != nil
	if td == nil {
		if !s.autoResponse() {
			s.closeVAD()
			return vadResult{}
		}
		td = s.cfg.defaultTurnDetection()
	}
	if s.vad != nil && s.vadTD != *td {
		// session.update changed the VAD settings: the next segment uses the new ones.
		s.closeVAD()
	}
	if s.vad == nil {
		v, err := speech.NewVAD(speech.VADConfig{
			SampleRate: EngineRate, Threshold: td.Threshold, PrefixPaddingMs: td.PrefixPaddingMs,
			SilenceDurationMs: td.SilenceDurationMs, MinSpeechMs: overlapMinSpeechMs,
			EarlySpeechMs: overlapEarlySpeechMs,
		})
		if err != nil {
			// Config validation keeps the threshold in range, so only allocation can fail here;
			// the session keeps working without barge-in on speech.
			s.log.Warn("creating the overlap vad", zap.Error(err))
			return vadResult{}
		}
		s.vad, s.vadTD = v, *td
		s.vadBaseMs = s.inputMs - float64(len(pcm))*1000/EngineRate
	}
	evs, err := s.vad.Process(pcm)
	if err != nil {
		s.log.Debug("overlap vad", zap.Error(err))
		return vadResult{}
	}
	s.markVAD(len(pcm), td.PrefixPaddingMs, evs)
	var res vadResult
	for _, ev := range evs { // evs is reused by the next Process call: consumed here
		switch ev.Kind {
		case speech.SpeechStarted:
			res.voiced, res.started = true, true
			if announce && !s.inSpeech {
				s.inSpeech = true
				if s.speechItemID == "" {
					s.speechItemID = newItemID()
				}
				s.send(Event{Epoch: s.epoch, Payload: protocol.InputAudioBufferSpeechStarted{
					AudioStartMs: int(s.vadBaseMs) + int(ev.AtMs), ItemID: s.speechItemID}})
			}
		case speech.SpeechStopped:
			if s.inSpeech {
				s.inSpeech = false
				res.stopped = true
				end := min(s.vadBaseMs+float64(ev.AtMs)+float64(td.SilenceDurationMs), s.inputMs)
				s.send(Event{Epoch: s.epoch, Payload: protocol.InputAudioBufferSpeechStopped{
					AudioEndMs: int(end), ItemID: s.speechItemID}})
				if m := turnStats(s.engine); m != nil {
					m.MarkInputEnd(s.input, s.m.cfg.WallClock())
				}
			}
		}
	}
	res.voiced = res.voiced || s.vad.InSpeech()
	return res
}

// vadMark is one append as the VAD saw it.
type vadMark struct {
	endMs int64
	at    float64
}

// markVAD records the append that was just processed and, when it completed a SpeechStarted,
// sets onsetAt to the receipt time of the append holding the onset (the VAD confirms speech
// only after min speech; the turn's t0 is the onset, as speech_started reports it).
func (s *Session) markVAD(samples, prefixPaddingMs int, evs []speech.VADEvent) {
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
func (s *Session) resetVAD() {
	if s.vad == nil {
		return
	}
	if s.inSpeech {
		s.inSpeech = false
		s.send(Event{Epoch: s.epoch, Payload: protocol.InputAudioBufferSpeechStopped{
			AudioEndMs: int(s.inputMs), ItemID: s.speechItemID}})
	}
	s.vad.Reset()
	s.vadMarks, s.vadFed, s.onsetAt = [16]vadMark{}, 0, 0
	s.vadBaseMs = s.inputMs
}

// closeVAD frees the WebRTC instance (C memory the GC does not see); Run defers it so every exit
// path releases it.
func (s *Session) closeVAD() {
	if s.vad != nil {
		s.vad.Close()
		s.vad = nil
	}
	s.inSpeech = false
	s.vadMarks, s.vadFed, s.onsetAt = [16]vadMark{}, 0, 0
}

// armIdleTimeout starts turn_detection.idle_timeout_ms after a response: the clock runs from
// response.done plus the playback still ahead of the client (the audio sent beyond real time).
func (s *Session) armIdleTimeout(r *response) {
	td := s.cfg.TurnDetection
	if td == nil || td.IdleTimeoutMs <= 0 || s.detached {
		return
	}
	ahead := 0.0
	if !r.started.IsZero() {
		ahead = max(0, r.sentMs-float64(s.m.cfg.Now().Sub(r.started))/float64(time.Millisecond))
	}
	s.stopIdleTimeout()
	s.idleFromMs = s.inputMs
	s.vadIdle.Reset(time.Duration(float64(td.IdleTimeoutMs)+ahead) * time.Millisecond)
}

func (s *Session) stopIdleTimeout() {
	if s.vadIdle == nil {
		return
	}
	if !s.vadIdle.Stop() {
		select {
		case <-s.vadIdle.C:
		default:
		}
	}
}

// idleTimeoutTriggered is OpenAI's idle timeout: the user said nothing for idle_timeout_ms after
// the assistant finished. The buffer is committed (if it holds audio) and a response follows.
func (s *Session) idleTimeoutTriggered() {
	td := s.cfg.TurnDetection
	if td == nil || td.IdleTimeoutMs <= 0 || s.resp != nil || s.inSpeech || s.engine == nil || s.detached {
		return
	}
	// The silent segment is the input heard since the assistant's audio finished playing: the
	// last idle_timeout_ms of input when the client streams in real time (as it must to be
	// heard), never from before response.done. The buffer since the last commit would also
	// span the reply (10.3 s for a 5 s timeout), which OpenAI's "roughly matches the
	// configured timeout" rules out.
	start := min(s.inputMs, max(s.idleFromMs, s.inputMs-float64(td.IdleTimeoutMs)))
	id := s.speechItemID
	if id == "" {
		id = newItemID()
		s.speechItemID = id
	}
	s.send(Event{Epoch: s.epoch, Payload: protocol.InputAudioBufferTimeoutTriggered{
		AudioStartMs: int(start), AudioEndMs: int(s.inputMs), ItemID: id}})
	if !s.autoResponse() && len(s.inputBuf) > 0 && s.inputMs-s.bufStartMs >= 100 {
		respond := true // the timeout's purpose is the response
		s.handleCommit("", &respond)
		return
	}
	s.speechItemID = ""
	s.respondNow(s.cfg.MaxOutputTokens)
}

// respondNow starts a response over the conversation as it is, without new input.
func (s *Session) respondNow(maxTok int) {
	r := s.beginResponse(-1, maxTok)
	eng := s.engine
	if !s.submitJob(job{responseID: r.id, run: func(ctx context.Context) jobResult {
		if !r.claimEngine() {
			return jobResult{}
		}
		t, err := eng.Respond(ctx, r.turn, maxTok)
		return jobResult{turn: t, haveTurn: err == nil, err: err, errCode: "runtime_respond_failed"}
	}}) {
		s.failResponse(r, "input_backpressure", "too many pending engine jobs")
		return
	}
	r.jobbed = true
}

// echoMaxDelayMs bounds the delay between sending audio and hearing it back in the input that
// the echo canceller searches: the client's playback buffer plus the room.
const echoMaxDelayMs = 400

// listening reports whether a VAD runs on the input (server_vad, or auto_response's silent one),
// which is when sent audio must be kept as the echo canceller's reference.
func (s *Session) listening() bool {
	return s.cfg.TurnDetection != nil || s.autoResponse()
}

// echoCanceller returns the session's canceller, made on the first audio sent while a VAD
// listens (pure Go, no C memory).
func (s *Session) echoCanceller() *audio.EchoCanceller {
	if s.echo == nil {
		s.echo = audio.NewEchoCanceller(echoMaxDelayMs)
	}
	return s.echo
}

// echoReference converts a 24 kHz talker frame to 16 kHz (linear interpolation: the canceller
// correlates and subtracts, it does not need a band-limited resampler).
func echoReference(pcm []float32) []float32 {
	n := len(pcm) * EngineRate / OutputRate
	out := make([]float32, n)
	for i := range out {
		x := float64(i) * OutputRate / EngineRate
		j := int(x)
		frac := float32(x - float64(j))
		a := pcm[j]
		b := a
		if j+1 < len(pcm) {
			b = pcm[j+1]
		}
		out[i] = a + (b-a)*frac
	}
	return out
}
