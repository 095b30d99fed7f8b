package session

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// The input path on the actor: one input_audio_buffer.append from the wire to the engine
// (handleAppend), in the order the audio takes. The decisions are inputAudio's (input.go:
// decode and clean, listen, buffer, what may be forwarded) and semState's (semvad.go: when a
// semantic pause ends the turn); the actor turns them into events, state transitions and engine
// calls.

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

// handleAppend is input_audio_buffer.append, in the order the audio takes: decoded and cleaned
// onto the input clock (takeAppend), heard by the overlap VAD (detectSpeech), a possible
// barge-in on the response (bargeIn), then either buffered until its commit (bufferInput:
// manual turns and the session's own server_vad) or, with auto_response, streamed to the
// engine here.
func (s *Session) handleAppend(c *AppendAudio) {
	pcm, fe := s.takeAppend(c.Data, s.cfg.InputFormat, c.Format)
	if fe != nil {
		s.sendError(fe.Code, fe.Message, c.ID, fe.Param)
		return
	}
	if len(pcm) == 0 {
		return
	}
	vr := s.detectSpeech(pcm)
	s.bargeIn(vr)
	if !s.autoResponse() {
		s.bufferInput(c.ID, pcm, vr)
		return
	}
	if !s.ensureEngine(c.ID) {
		return
	}
	if at, ok := s.speechArrival(vr, s.m.cfg.WallClock()); ok {
		s.engine.MarkTurnArrival(s.input, at)
	}
	if err := s.engine.AppendAudio(s.engineCtx, s.input, pcm); err != nil {
		if errors.Is(err, requestclient.ErrInputBackpressure) {
			s.sendError("input_backpressure", err.Error(), c.ID, "audio")
			return
		}
		s.sendError("runtime_append_failed", err.Error(), c.ID, "")
	}
}

// bargeIn is the overlap policy on speech the VAD confirmed in an append: it ends the idle
// follow-up, and under interrupt_response it cancels the active response, timing the barge-in
// from the onset's own append.
func (s *Session) bargeIn(vr vadResult) {
	if !vr.started {
		return
	}
	s.idle.stop() // the user spoke: no idle follow-up
	if s.resp == nil || s.cfg.TurnDetection == nil || !s.cfg.TurnDetection.InterruptResponse {
		return
	}
	s.send(Event{Epoch: s.epoch, Payload: protocol.OverlapDecision{
		SessionID: s.id, Epoch: s.epoch, Policy: PolicyBargeIn, Action: "barge_in", Reason: "speech"}})
	onset := s.onsetAt
	if s.cancelActive("turn_detected", "turn_detected", true) && onset > 0 {
		if m := turnStats(s.engine); m != nil {
			lat := s.m.cfg.WallClock() - onset
			m.ObserveBargeIn(lat)
		}
	}
}

// bufferInput keeps an append in the uncommitted buffer (manual turns, the session's own
// server_vad), opens the engine ahead at the buffer's first chunk, forwards what may go ahead,
// and under server_vad commits at the end of speech.
func (s *Session) bufferInput(eventID string, pcm []float32, vr vadResult) {
	first, ok := s.buffer(pcm, s.m.cfg.MaxPendingInputBytes, s.m.cfg.WallClock())
	if !ok {
		s.sendError("input_backpressure", fmt.Sprintf("more than %d bytes of input are pending", s.m.cfg.MaxPendingInputBytes), eventID, "audio")
		return
	}
	if s.resp == nil {
		s.turnState = TurnUserSpeaking
	}
	if first {
		s.openAhead() // the first turn decodes ahead too (ahead.go); tried once per buffer
	}
	s.forwardInput()
	if vr.stopped || s.semanticEnd() {
		// server_vad commits the buffer at the end of speech (semantic_vad at the end of the
		// turn), and with create_response answers it (unless a response is still running:
		// interrupt_response false).
		s.commitTurn()
	}
}

// forwardInput streams the uncommitted input buffer into the engine ahead of the commit, so the
// ASR decodes while the user speaks and the commit pays only the final hypothesis. It forwards
// only while nothing could reorder it or change what it means: the engine is open (the first
// append opens it, ahead.go), no response is active (input during a
// response stays buffered, as the overlap policies expect), no engine job is queued or running
// (appends go straight to the engine's FIFO and must not overtake a queued commit), and the
// engine can discard (input_audio_buffer.clear must make the ASR forget). Otherwise the chunks
// stay local and the commit job feeds them, as before.
func (s *Session) forwardInput() {
	if s.engine == nil || s.resp != nil || s.jobsOut > 0 || len(s.unforwarded()) == 0 {
		return
	}
	if _, ok := s.engine.(AudioDiscarder); !ok {
		return
	}
	if s.inputFwd == 0 {
		// The turn's metrics arrival is its first append (keep-first; the commit's stamp is later).
		at := s.inputStartTS // the buffer's first append, also when the stream opened later
		if at <= 0 {
			at = s.m.cfg.WallClock()
		}
		s.engine.MarkTurnArrival(s.input, at)
	}
	for _, chunk := range s.unforwarded() {
		if err := s.engine.AppendAudio(s.engineCtx, s.input, chunk); err != nil {
			// Backpressure or a closing engine: the rest stays local for the commit job, which
			// reports a lasting failure.
			s.log.Debug("forwarding input ahead of commit", zap.Error(err))
			return
		}
		s.forwarded()
		s.aheadListens++
	}
}

// unforwardInput makes the engine forget the forwarded head of the input buffer; the buffer
// itself is kept (the next commit feeds all of it).
func (s *Session) unforwardInput(eventID string) {
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
		return
	}
	s.txCut("")
}

// clearInput is input_audio_buffer.clear: the buffer and whatever of it the ASR has heard are
// dropped.
func (s *Session) clearInput(eventID string) {
	s.closePause()
	s.unforwardInput(eventID)
	s.clearBuffer()
	s.dropOpenDeltas() // input transcription deltas of the dropped audio are void
	if m := turnStats(s.engine); m != nil {
		m.ClearTurnInput(s.input)
	}
	s.input++ // the next input is a new turn: rows of the cleared one are dropped on arrival
}

// detectSpeech hears one taken append (inputAudio.listen) and, under server_vad, emits
// speech_started / speech_stopped with their positions in the session's input audio and the id
// the user item will get on commit; semantic_vad's pauses go to semState instead.
func (s *Session) detectSpeech(pcm []float32) vadResult {
	res, edges, err := s.listen(pcm, s.cfg.TurnDetection, s.cfg.defaultTurnDetection(), s.autoResponse(), s.m.cfg.WallClock())
	switch {
	case errors.Is(err, errNoOverlapVAD):
		s.log.Warn("no overlap vad", zap.Error(err))
		return vadResult{}
	case err != nil:
		s.log.Debug("overlap vad", zap.Error(err))
		return vadResult{}
	}
	for _, e := range edges {
		switch {
		case e.resumed:
			s.sem.drop() // a semantic_vad pause that had not ended the turn: the same turn goes on
		case e.pause:
			// semantic_vad: speech_stopped waits for the pause's decision (semvad.go).
			s.sem.begin(float64(e.atMs), s.inputMs, SemanticParams(s.cfg.TurnDetection.Eagerness), time.Now())
		case e.started:
			s.send(Event{Epoch: s.epoch, Payload: protocol.InputAudioBufferSpeechStarted{
				AudioStartMs: e.atMs, ItemID: s.speechItemID}})
		default:
			s.send(Event{Epoch: s.epoch, Payload: protocol.InputAudioBufferSpeechStopped{
				AudioEndMs: e.atMs, ItemID: s.speechItemID}})
			if m := turnStats(s.engine); m != nil {
				m.MarkInputEnd(s.input, s.m.cfg.WallClock())
			}
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

// idleFollowUp is turn_detection.idle_timeout_ms's timer, armed at response.done and stopped
// when the user speaks, with the input audio position it was armed at.
type idleFollowUp struct {
	timer  *time.Timer
	fromMs float64
}

func newIdleFollowUp() idleFollowUp {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return idleFollowUp{timer: t}
}

// arm (re)starts the timer for d from input position fromMs.
func (f *idleFollowUp) arm(d time.Duration, fromMs float64) {
	f.stop()
	f.fromMs = fromMs
	f.timer.Reset(d)
}

func (f *idleFollowUp) stop() {
	if f.timer != nil {
		stopTimer(f.timer)
	}
}

// idleWait is how long the idle follow-up waits after response r ended (now): idle_timeout_ms
// from the end of the playback still ahead of the client (the audio sent beyond real time).
func idleWait(idleTimeoutMs int, r *response, now time.Time) time.Duration {
	ahead := 0.0
	if !r.started.IsZero() {
		ahead = max(0, r.sentMs-float64(now.Sub(r.started))/float64(time.Millisecond))
	}
	return time.Duration(float64(idleTimeoutMs)+ahead) * time.Millisecond
}

// armIdleTimeout starts turn_detection.idle_timeout_ms after response r (idleWait).
func (s *Session) armIdleTimeout(r *response) {
	if td := s.cfg.TurnDetection; td != nil && td.IdleTimeoutMs > 0 && !s.detached {
		s.idle.arm(idleWait(td.IdleTimeoutMs, r, s.m.cfg.Now()), s.inputMs)
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
	start := min(s.inputMs, max(s.idle.fromMs, s.inputMs-float64(td.IdleTimeoutMs)))
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
	// A response over the conversation as it is, without new input.
	o := s.cfg.replyOptions(s.cfg.MaxOutputTokens)
	s.startModelReply(s.beginResponse(-1, o), o)
}
