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
	if !r.play.started.IsZero() {
		ahead = max(0, r.play.sentMs-float64(now.Sub(r.play.started))/float64(time.Millisecond))
	}
	return time.Duration(float64(idleTimeoutMs)+ahead) * time.Millisecond
}

// armAfter starts turn_detection td's idle_timeout_ms after response r ended at now (idleWait),
// from input position inputMs; not while no client is attached.
func (f *idleFollowUp) armAfter(td *TurnDetection, r *response, now time.Time, inputMs float64, detached bool) {
	if td != nil && td.IdleTimeoutMs > 0 && !detached {
		f.arm(idleWait(td.IdleTimeoutMs, r, now), inputMs)
	}
}

// idleStep is what turn_detection.idle_timeout_ms asks of the actor when its timer fires: fire
// false is nothing; else input_audio_buffer.timeout_triggered (event), then either the buffer
// committed and answered (commit), or a response over the conversation as it is.
type idleStep struct {
	fire   bool
	event  Event
	commit bool
}

// fired is OpenAI's idle timeout: the user said nothing for td's idle_timeout_ms after the
// assistant finished, with input in. Nothing happens while the session is busy (a response
// runs, no engine is open, no client is attached) or the user speaks. The silent segment is
// the input heard since the assistant's audio finished playing: the last idle_timeout_ms of
// input when the client streams in real time (as it must to be heard), never from before
// response.done. The buffer since the last commit would also span the reply (10.3 s for a 5 s
// timeout), which OpenAI's "roughly matches the configured timeout" rules out. auto is an
// auto-response session (its input is not buffered); epoch fences the event.
func (f *idleFollowUp) fired(in *inputAudio, td *TurnDetection, busy, auto bool, epoch int) idleStep {
	if td == nil || td.IdleTimeoutMs <= 0 || busy || in.inSpeech {
		return idleStep{}
	}
	start := min(in.inputMs, max(f.fromMs, in.inputMs-float64(td.IdleTimeoutMs)))
	id := in.speechItemID
	if id == "" {
		id = newItemID()
		in.speechItemID = id
	}
	st := idleStep{fire: true, event: Event{Epoch: epoch, Effect: InputTimeout{
		AudioStartMs: int(start), AudioEndMs: int(in.inputMs), ItemID: id}}}
	st.commit = !auto && len(in.inputBuf) > 0 && in.inputMs-in.bufStartMs >= 100
	if !st.commit {
		in.speechItemID = "" // no item: the response reads the conversation as it is
	}
	return st
}

// plan is what the idle follow-up's step st does (idleFollowUp.fired): nothing, or
// input_audio_buffer.timeout_triggered, then the buffer committed (if it holds audio) and
// answered, or a response under o over the conversation as it is, without new input.
func (st idleStep) plan(o respOptions) []action {
	if !st.fire {
		return nil
	}
	if st.commit {
		return []action{emit{evs: []Event{st.event}}, commitInput{respond: true}} // the timeout's purpose is the response
	}
	return []action{emit{evs: []Event{st.event}}, replyOver{o: o}}
}
