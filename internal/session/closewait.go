package session

import "time"

// closeWait holds a client's session.close behind the outcome of the commits admitted before
// it. In vllm-omni's dialect a commit under auto_response hands the utterance to the engine,
// which decides, and every accepted commit ends in a response or a listen; vllm-omni closes a
// session "after previously admitted mailbox events". So a close that arrives while such a
// commit is undecided waits until the outcome has gone out (a response began, or a listen with
// its reason ended the turn), at most closeOutcomeWait; then the session closes as usual,
// cancelling the response that runs. Without it a client that commits and closes at once
// (vllm-omni's barge-in example) never sees the commit's committed event nor its answer.
type closeWait struct {
	owed   int    // commits handed to the engine to decide whose outcome has not gone out
	reason string // the close being held ("" = none)
	bound  *time.Timer
}

// afterClose reports whether command c still applies while a close is held: the ones that
// change no conversation (a heartbeat, a playback acknowledgement of what was heard, a
// repeated close). Anything else is refused, input text included (InputActivity: the text a
// dialect holds would never be committed): the close was the client's last word.
func afterClose(c Command) bool {
	switch c.(type) {
	case *Heartbeat, *PlaybackAck, *CloseSession:
		return true
	}
	return false
}

// closeOutcomeWait bounds how long a close waits for the outcome of the commits before it.
const closeOutcomeWait = 5 * time.Second

// decided counts one commit whose outcome the engine decides.
func (w *closeWait) decided() { w.owed++ }

// hold reports whether a close for reason must wait for an owed outcome; it then arms the
// bound, which calls expire (the session's Stop: the close goes on without the outcome). A
// second close while one is held changes nothing.
func (w *closeWait) hold(reason string, expire func(reason string)) bool {
	if w.owed == 0 || w.reason != "" {
		return w.reason != ""
	}
	w.reason = reason
	w.bound = time.AfterFunc(closeOutcomeWait, func() { expire(reason) })
	return true
}

// observe sees an effect going out and reports whether the held close is now due: a response
// that began is the outcome of every commit before it, a listen with a reason that of one.
func (w *closeWait) observe(e Effect) bool {
	switch e := e.(type) {
	case ResponseStarted:
		w.owed = 0
	case TurnDecision:
		if e.Reason != "" && w.owed > 0 {
			w.owed--
		}
	}
	return w.due()
}

// settled counts the outcome of one commit of audio the engine had taken, when running (a
// response runs: it is that commit's outcome), and returns closeReason, or the held close's
// reason when it is now due and no other close came first.
func (w *closeWait) settled(running bool, closeReason string) string {
	if running && w.owed > 0 {
		w.owed--
	}
	if closeReason == "" && w.due() {
		return w.reason
	}
	return closeReason
}

// due reports whether a close is held and nothing is owed any more.
func (w *closeWait) due() bool { return w.reason != "" && w.owed == 0 }

// stop releases the bound.
func (w *closeWait) stop() {
	if w.bound != nil {
		w.bound.Stop()
	}
}
