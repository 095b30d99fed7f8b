package session

import (
	"time"
)

// turn_detection.idle_timeout_ms: after a response, the user's silence for that long commits
// what was heard (if anything) and starts a response of the session's own.

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
	if td := s.settings.cfg.TurnDetection; td != nil && td.IdleTimeoutMs > 0 && !s.attachment.detached {
		s.idle.arm(idleWait(td.IdleTimeoutMs, r, s.m.cfg.Now()), s.inputAudio.inputMs)
	}
}

// idleTimeoutTriggered is OpenAI's idle timeout: the user said nothing for idle_timeout_ms after
// the assistant finished. The buffer is committed (if it holds audio) and a response follows.
func (s *Session) idleTimeoutTriggered() {
	td := s.settings.cfg.TurnDetection
	if td == nil || td.IdleTimeoutMs <= 0 || s.responses.resp != nil || s.inputAudio.inSpeech || s.engine == nil || s.attachment.detached {
		return
	}
	// The silent segment is the input heard since the assistant's audio finished playing: the
	// last idle_timeout_ms of input when the client streams in real time (as it must to be
	// heard), never from before response.done. The buffer since the last commit would also
	// span the reply (10.3 s for a 5 s timeout), which OpenAI's "roughly matches the
	// configured timeout" rules out.
	start := min(s.inputAudio.inputMs, max(s.idle.fromMs, s.inputAudio.inputMs-float64(td.IdleTimeoutMs)))
	id := s.inputAudio.speechItemID
	if id == "" {
		id = newItemID()
		s.inputAudio.speechItemID = id
	}
	s.send(Event{Epoch: s.epoch, Effect: InputTimeout{
		AudioStartMs: int(start), AudioEndMs: int(s.inputAudio.inputMs), ItemID: id}})
	if !s.settings.autoResponse() && len(s.inputAudio.inputBuf) > 0 && s.inputAudio.inputMs-s.inputAudio.bufStartMs >= 100 {
		respond := true // the timeout's purpose is the response
		s.handleCommit("", &respond)
		return
	}
	s.inputAudio.speechItemID = ""
	// A response over the conversation as it is, without new input.
	o := s.settings.cfg.replyOptions(s.settings.cfg.MaxOutputTokens)
	s.startModelReply(s.beginResponse(-1, o), o)
}
