package session

// A commit's outcome in vllm-omni's dialect, where a commit ends an utterance and every
// accepted commit ends in a response or a listen. Two commits have no audio of their own there:
//   - one whose audio the engine has already taken: under auto_response the input streams into
//     the engine, whose own VAD may end the utterance (and answer it) before the client
//     commits. vllm-omni accepts such a commit; the dialect marks it (CommitInput.AcceptConsumed,
//     when audio came since the last commit), and the engine's empty-audio answer becomes
//     jobResult.consumed instead of input_audio_buffer_empty;
//   - one the client says is silence (is_speech: false): the audio is dropped.
// Both come back as a job's result (jobResult.consumed, in order with the engine work before
// them: Session.handleCommit, commitStreamed), and commit an empty user item
// (input_audio_buffer.committed with Empty); then the running response is the outcome, or,
// with none, a listen with its reason (Session.handleResult).

// Why a turn ended in a listen without a response (TurnDecision.Reason; vllm-omni's names).
const (
	ReasonSilence  = "silence_or_noise"                    // the client said the input was not speech
	ReasonNoOutput = "model_turn_completed_without_output" // the engine had taken the audio and is not answering
)

// listenEvent is the listen that ends a turn without a response, for reason.
func listenEvent(sessionID string, epoch, turn int, reason string) Event {
	return Event{Epoch: epoch, Effect: TurnDecision{SessionID: sessionID, Epoch: epoch, Turn: turn, Reason: reason}}
}

// emptyCommit decides a commit without audio of its own: an empty user item joins the
// conversation, its committed event marked Empty. The turn's outcome is the response that runs,
// else the one the engine is about to give to the utterance its VAD ended: one whose transcript
// has not come yet (speech_started announced in.speechItemID, which the transcript's item will
// take), or whose engine turn is not over. Then the listen is owed until that turn is over
// without a response (settleListen). Else the listen is due now; NoResponse marks that case.
func emptyCommit(conv *conversation, rs *responses, in *inputAudio, now float64, epoch int, reason string) (*item, []Event, bool) {
	// A silence commit dropped the audio: no transcript of it is coming.
	awaiting := in.speechItemID != "" && reason != ReasonSilence
	pending := rs.resp == nil && (awaiting || (rs.heardTurn >= 0 && !rs.over(rs.heardTurn)))
	listen := rs.resp == nil && !pending
	if pending {
		rs.owedListen, rs.owedAwait = reason, awaiting
	}
	speechID := ""
	if !awaiting {
		speechID = in.takeSpeechID()
	}
	it, evs := conv.commitAudio(speechID, 0, now, epoch)
	for i, ev := range evs {
		if c, ok := ev.Effect.(InputCommitted); ok {
			c.Empty, c.NoResponse = true, listen
			evs[i].Effect = c
		}
	}
	return it, evs, listen
}

// heard records the engine turn of an utterance its VAD ended.
func (rs *responses) heard(turn int) {
	rs.owedAwait = false
	if turn > rs.heardTurn {
		rs.heardTurn = turn
	}
}

// settleListen is the reason of the listen owed by a commit, now due: its turn is over and no
// response carried it ("" when none is owed, or not yet due). A response that began settles it
// too, as the turn's outcome.
func (rs *responses) settleListen() string {
	reason := rs.owedListen
	switch {
	case reason == "":
		return ""
	case rs.resp != nil:
		rs.owedListen = ""
		return ""
	case rs.owedAwait || !rs.over(rs.heardTurn):
		return ""
	}
	rs.owedListen = ""
	return reason
}
