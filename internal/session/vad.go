package session

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/protocol"
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

// detectSpeech runs the session's overlap VAD over one taken append (inputAudio.hear) and,
// under server_vad, emits speech_started / speech_stopped with their positions in the
// session's input audio and the id the user item will get on commit. With turn_detection null
// the VAD runs only for auto_response's t0, silently and with the default settings.
func (s *Session) detectSpeech(pcm []float32) vadResult {
	heard := s.withoutEcho(pcm)
	td := s.cfg.TurnDetection
	announce := td != nil
	if td == nil {
		if !s.autoResponse() {
			s.closeVAD()
			return vadResult{}
		}
		td = s.cfg.defaultTurnDetection()
	}
	vt := *td
	vt.SilenceDurationMs = vadSilenceMs(td, s.autoResponse()) // semantic_vad finds pauses with its minimum silence
	if err := s.ensureVAD(vt, len(pcm)); err != nil {
		// Config validation keeps the threshold in range, so only allocation can fail here;
		// the session keeps working without barge-in on speech.
		s.log.Warn("no overlap vad", zap.Error(err))
		return vadResult{}
	}
	res, edges, err := s.hear(heard, announce, semanticPauses(td, s.autoResponse()), s.m.cfg.WallClock())
	if err != nil {
		s.log.Debug("overlap vad", zap.Error(err))
		return vadResult{}
	}
	for _, e := range edges {
		switch {
		case e.resumed:
			s.sem.drop() // a semantic_vad pause that had not ended the turn: the same turn goes on
			continue
		case e.pause:
			// semantic_vad: speech_stopped waits for the pause's decision (semvad.go).
			s.sem.begin(float64(e.atMs), s.inputMs, SemanticParams(s.cfg.TurnDetection.Eagerness), time.Now())
			continue
		}
		if e.started {
			if s.speechItemID == "" {
				s.speechItemID = newItemID()
			}
			s.send(Event{Epoch: s.epoch, Payload: protocol.InputAudioBufferSpeechStarted{
				AudioStartMs: e.atMs, ItemID: s.speechItemID}})
			continue
		}
		s.send(Event{Epoch: s.epoch, Payload: protocol.InputAudioBufferSpeechStopped{
			AudioEndMs: e.atMs, ItemID: s.speechItemID}})
		if m := turnStats(s.engine); m != nil {
			m.MarkInputEnd(s.input, s.m.cfg.WallClock())
		}
	}
	return res
}

// resetVAD starts a response with a fresh detector, so only speech that begins during the
// response can barge in on it. A segment announced to the client is closed first: the VAD
// forgets it, and speech_started must not come twice without a speech_stopped between.
func (s *Session) resetVAD() {
	s.sem.drop() // an undecided semantic_vad pause is forgotten
	if s.restartVAD() {
		s.send(Event{Epoch: s.epoch, Payload: protocol.InputAudioBufferSpeechStopped{
			AudioEndMs: int(s.inputMs), ItemID: s.speechItemID}})
	}
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

// listening reports whether a VAD runs on the input (server_vad, or auto_response's silent one),
// which is when sent audio must be kept as the echo canceller's reference.
func (s *Session) listening() bool {
	return s.cfg.TurnDetection != nil || s.autoResponse()
}
