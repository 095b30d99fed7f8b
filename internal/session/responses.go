package session

import (
	"strings"
	"time"
)

// responses is the session's response bookkeeping: the active response, the engine turns
// whose output is over, the user input waiting for an answer, and the usage the next
// response finds cached. With the response's own methods below (its transcript, its audio
// frames and their pacing, what the user heard) it is what a response is, without the events
// and engine calls the session makes of it (response.go). The decisions it takes on
// one typed input, returning effects, are in responses_core.go.
type responses struct {
	sessionID        string // the session's id, which its responses' ids and objects carry
	defaultMaxTokens int    // the server's max_output_tokens, told for a response without its own

	resp       *response       // the active response; nil = none
	lastClosed int             // highest engine turn whose output is over (done or cancelled); -1 = none
	pendingIn  int             // committed user inputs not yet answered
	lastUsage  usage           // the previous response's usage (its context is cached)
	turnState  string          // the conversation's turn state (turnIdle...), told in the session object
	turnID     int             // the last response's turn number (the omniserve extension's turn_id)
	finished   []finishedAudio // the last responses that ended, which playback.ack may still name
	// heardTurn is the engine turn of the last utterance its own VAD ended (-1: none), and
	// owedListen the reason of a listen a commit owes until that turn is over without a
	// response ("": none) (commit_outcome.go).
	heardTurn  int
	owedListen string
	owedAwait  bool // the owed listen waits for the transcript of the utterance the engine ended
}

func newResponses(sessionID string, defaultMaxTokens int) responses {
	return responses{sessionID: sessionID, defaultMaxTokens: defaultMaxTokens, lastClosed: -1, heardTurn: -1, turnState: turnIdle}
}

// over reports whether the engine turn's output is over (done or cancelled): its late outputs
// are dropped.
func (rs *responses) over(turn int) bool { return turn <= rs.lastClosed }

// closeTurn marks the engine turn's output over.
func (rs *responses) closeTurn(turn int) {
	if turn > rs.lastClosed {
		rs.lastClosed = turn
	}
}

// userSpeaks marks the user speaking when an append was kept (ok) while no response is active.
func (rs *responses) userSpeaks(ok bool) {
	if ok && rs.resp == nil {
		rs.turnState = turnUserSpeaking
	}
}

// activeItemID is the active response's item id ("": no response is active).
func (rs *responses) activeItemID() string {
	if rs.resp == nil {
		return ""
	}
	return rs.resp.itemID
}

// end clears the active response and returns it (nil when none): its engine turn is over and,
// unless it was out of band, it answered one pending input.
func (rs *responses) end() *response {
	r := rs.resp
	if r == nil {
		return nil
	}
	rs.resp = nil
	rs.keepFinished(r)
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

// playback is a response's audio on its way to the client: the frames queued, those sent with
// their text, the pacing clock, and what the client acknowledged it played. Its methods cut,
// pace and clip that audio; they read no clock (now is passed in) and send nothing.
type playback struct {
	enc        OutputEncoder // one resampler for the response's audio stream
	frames     []frame
	sent       []sentFrame
	sentMs     float64
	underrunMs float64 // time the client's playback ran out of sent audio (paced delivery fell behind)
	detachedMs float64 // time delivery was paused because the client was disconnected (resumed since)
	started    time.Time
	playedMs   float64 // client-acknowledged playback, -1 = none
	ackedMs    float64 // the last playback.ack's played_ms (only acks, not the pacing estimate); -1 = none
}

// replyText is a response's text: the text modality's deltas, whether its text part was
// announced, the transcript of its audio as sent in deltas, and the model tokens behind them.
type replyText struct {
	text       strings.Builder // text modality deltas
	textPart   bool
	transcript strings.Builder // the transcript as sent in deltas
	outTokens  int             // model tokens behind the text deltas received
}

// settleItem makes the response's output item what the user got: the text heard (none when
// the client truncated it) and the audio played (the sent audio, clipped to the client's
// playback acknowledgement).
func (r *response) settleItem(it *item) {
	it.Text = r.heardText()
	if r.truncated {
		it.Text = ""
	}
	it.AudioMs = r.play.sentMs
	if r.play.playedMs >= 0 {
		it.AudioMs = min(r.play.sentMs, r.play.playedMs)
	}
}

// joinTranscript returns a phrase's transcript delta so that the deltas concatenate into the
// exact transcript: the talker's phrases carry no separating space.
func (t *replyText) joinTranscript(text string) string {
	if text == "" {
		return ""
	}
	if cur := t.transcript.String(); cur != "" && !strings.HasSuffix(cur, " ") && !strings.HasPrefix(text, " ") {
		text = " " + text
	}
	t.transcript.WriteString(text)
	return text
}

// queueAudio cuts a phrase of talker audio (24 kHz) into frames of ms in the response's
// format, the phrase's text on its first frame; withRef keeps each frame at 16 kHz as the echo
// canceller's reference (while a VAD listens). Text without audio is a frame of its own.
func (p *playback) queueAudio(pcm []float32, text string, format AudioFormat, withRef bool, ms int) {
	per := OutputRate * ms / 1000
	for i := 0; i < len(pcm); i += per {
		end := min(i+per, len(pcm))
		f := frame{data: p.enc.Encode(pcm[i:end], format), ms: float64(end-i) * 1000 / OutputRate}
		if withRef {
			f.ref = echoReference(pcm[i:end])
		}
		if i == 0 {
			f.text = text
		}
		p.frames = append(p.frames, f)
	}
	if len(pcm) == 0 && text != "" {
		p.frames = append(p.frames, frame{text: text})
	}
}

// nextFrame takes the next queued frame that may be sent at now, keeping at most leadMs of
// audio ahead of real time (the client's playback from the first frame); it counts the time the
// client's playback ran dry (underrunMs). Without one: wait > 0 is how long until the next may
// go, 0 that nothing is queued.
func (p *playback) nextFrame(now time.Time, leadMs float64) (f frame, wait time.Duration, ok bool) {
	if len(p.frames) == 0 {
		return frame{}, 0, false
	}
	if p.started.IsZero() {
		p.started = now
	}
	elapsed := float64(now.Sub(p.started)) / float64(time.Millisecond)
	if p.sentMs > elapsed+leadMs {
		wait := time.Duration((p.sentMs - elapsed - leadMs) * float64(time.Millisecond))
		return frame{}, max(wait, time.Millisecond), false
	}
	if play := elapsed - p.underrunMs; p.sentMs > 0 && play > p.sentMs {
		// The client played everything sent before this frame was ready: an underrun.
		p.underrunMs += play - p.sentMs
	}
	f = p.frames[0]
	p.frames = p.frames[1:]
	p.sent = append(p.sent, sentFrame{startMs: p.sentMs, text: f.text})
	p.sentMs += f.ms
	return f, 0, true
}

// assumePlayed fixes what the client played of the sent audio when the response is cut: its
// playback.ack if it sent one, else the pacing clock, which assumes playback at real time from
// the first delta.
func (p *playback) assumePlayed(now time.Time) {
	if p.playedMs >= 0 {
		return
	}
	elapsed := float64(now.Sub(p.started)) / float64(time.Millisecond)
	p.playedMs = max(0, min(p.sentMs, elapsed))
}
