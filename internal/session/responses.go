package session

import (
	"strings"
	"time"
)

// responses is the session's response bookkeeping: the active response, the engine turns
// whose output is over, the user input waiting for an answer, and the usage the next
// response finds cached. With the response's own methods below (its transcript, its audio
// frames and their pacing, what the user heard) it is what a response is, without the events
// and engine calls the session makes of it (response.go). Session embeds it: s.resp and the
// counters read as they always did.
type responses struct {
	resp       *response // the active response; nil = none
	lastClosed int       // highest engine turn whose output is over (done or cancelled); -1 = none
	pendingIn  int       // committed user inputs not yet answered
	lastUsage  usage     // the previous response's usage (its context is cached)
}

func newResponses() responses { return responses{lastClosed: -1} }

// over reports whether the engine turn's output is over (done or cancelled): its late outputs
// are dropped.
func (rs *responses) over(turn int) bool { return turn <= rs.lastClosed }

// closeTurn marks the engine turn's output over.
func (rs *responses) closeTurn(turn int) {
	if turn > rs.lastClosed {
		rs.lastClosed = turn
	}
}

// end clears the active response and returns it (nil when none): its engine turn is over and,
// unless it was out of band, it answered one pending input.
func (rs *responses) end() *response {
	r := rs.resp
	if r == nil {
		return nil
	}
	rs.resp = nil
	rs.closeTurn(r.turn.Engine())
	if rs.pendingIn > 0 && !r.outOfBand {
		rs.pendingIn--
	}
	return r
}

// keepUsage records a finished response's usage u as what the next response finds cached,
// when it read the conversation and the engine counted it.
func (rs *responses) keepUsage(r *response, u usage) {
	if !r.ownInput && r.engineUsage != nil {
		rs.lastUsage = u
	}
}

// settleItem makes the response's output item what the user got: the text heard (none when
// the client truncated it) and the audio played (the sent audio, clipped to the client's
// playback acknowledgement).
func (r *response) settleItem(it *item) {
	it.Text = r.heardText()
	if r.truncated {
		it.Text = ""
	}
	it.AudioMs = r.sentMs
	if r.playedMs >= 0 {
		it.AudioMs = min(r.sentMs, r.playedMs)
	}
}

// joinTranscript returns a phrase's transcript delta so that the deltas concatenate into the
// exact transcript: the talker's phrases carry no separating space.
func (r *response) joinTranscript(text string) string {
	if text == "" {
		return ""
	}
	if cur := r.transcript.String(); cur != "" && !strings.HasSuffix(cur, " ") && !strings.HasPrefix(text, " ") {
		text = " " + text
	}
	r.transcript.WriteString(text)
	return text
}

// queueAudio cuts a phrase of talker audio (24 kHz) into frameMs frames in the response's
// format, the phrase's text on its first frame; withRef keeps each frame at 16 kHz as the echo
// canceller's reference (while a VAD listens). Text without audio is a frame of its own.
func (r *response) queueAudio(pcm []float32, text string, withRef bool) {
	per := OutputRate * frameMs / 1000
	for i := 0; i < len(pcm); i += per {
		end := min(i+per, len(pcm))
		f := frame{data: r.enc.Encode(pcm[i:end], r.format), ms: float64(end-i) * 1000 / OutputRate}
		if withRef {
			f.ref = echoReference(pcm[i:end])
		}
		if i == 0 {
			f.text = text
		}
		r.frames = append(r.frames, f)
	}
	if len(pcm) == 0 && text != "" {
		r.frames = append(r.frames, frame{text: text})
	}
}

// nextFrame takes the next queued frame that may be sent at now, keeping at most leadMs of
// audio ahead of real time (the client's playback from the first frame); it counts the time the
// client's playback ran dry (underrunMs). Without one: wait > 0 is how long until the next may
// go, 0 that nothing is queued.
func (r *response) nextFrame(now time.Time, leadMs float64) (f frame, wait time.Duration, ok bool) {
	if len(r.frames) == 0 {
		return frame{}, 0, false
	}
	if r.started.IsZero() {
		r.started = now
	}
	elapsed := float64(now.Sub(r.started)) / float64(time.Millisecond)
	if r.sentMs > elapsed+leadMs {
		wait := time.Duration((r.sentMs - elapsed - leadMs) * float64(time.Millisecond))
		return frame{}, max(wait, time.Millisecond), false
	}
	if play := elapsed - r.underrunMs; r.sentMs > 0 && play > r.sentMs {
		// The client played everything sent before this frame was ready: an underrun.
		r.underrunMs += play - r.sentMs
	}
	f = r.frames[0]
	r.frames = r.frames[1:]
	r.sent = append(r.sent, sentFrame{startMs: r.sentMs, text: f.text})
	r.sentMs += f.ms
	return f, 0, true
}

// assumePlayed fixes what the client played of the sent audio when the response is cut: its
// playback.ack if it sent one, else the pacing clock, which assumes playback at real time from
// the first delta.
func (r *response) assumePlayed(now time.Time) {
	if r.playedMs >= 0 {
		return
	}
	elapsed := float64(now.Sub(r.started)) / float64(time.Millisecond)
	r.playedMs = max(0, min(r.sentMs, elapsed))
}
