package session

import "github.com/omniserve/omniserve/internal/duplex"

// A commit's outcome in vllm-omni's dialect, where a commit ends an utterance and every
// accepted commit ends in a response or a listen. Two commits have no audio of their own there:
//   - one whose audio the engine has already taken: under auto_response the input streams into
//     the engine, whose own VAD may end the utterance (and answer it) before the client
//     commits. vllm-omni accepts such a commit; the dialect marks it (CommitInput.AcceptConsumed,
//     when audio came since the last commit), and the engine's empty-audio answer becomes
//     jobResult.consumed instead of input_audio_buffer_empty;
//   - one the client says is silence (is_speech: false): the audio is dropped.
// Both commit an empty user item (input_audio_buffer.committed with Empty), then the running
// response is the outcome, or, with none, a listen with its reason.

// Why a turn ended in a listen without a response (TurnDecision.Reason; vllm-omni's names).
const (
	ReasonSilence  = "silence_or_noise"                    // the client said the input was not speech
	ReasonNoOutput = "model_turn_completed_without_output" // the engine had taken the audio and is not answering
)

// handleCommitInput is input_audio_buffer.commit: the silence commit, the commit that accepts
// consumed audio, or the plain commit (handleCommit).
func (s *Session) handleCommitInput(c *CommitInput) {
	switch {
	case c.Silence:
		s.run(clearInput{eventID: c.ID})
		s.commitWithoutInput(ReasonSilence)
	case c.AcceptConsumed && s.settings.autoResponse():
		s.sem.abandon(&s.inputAudio)
		respond := true
		if c.ResponseCreate != nil && !s.settings.opts.Transcription {
			respond = *c.ResponseCreate
		}
		s.commitStreamedAs(c.ID, respond, true)
	default:
		s.handleCommit(c.ID, c.ResponseCreate)
	}
}

// commitWithoutInput runs emptyCommit's outcome: the item's events, its (empty) transcript,
// then the listen when it is due now.
func (s *Session) commitWithoutInput(reason string) {
	it, evs, listen := emptyCommit(&s.conv, &s.responses, s.inputAudio.takeSpeechID(), s.m.cfg.WallClock(), s.epoch, reason)
	s.tx.committed(it.ID)
	s.send(evs...)
	s.tx.completed(it.ID, duplex.Transcription{})
	s.run(trimHistory{})
	if listen {
		s.send(s.listenEvent(reason))
	}
}

// listenEvent is the listen that ends a turn without a response, for reason.
func (s *Session) listenEvent(reason string) Event {
	return Event{Epoch: s.epoch, Effect: TurnDecision{SessionID: s.id, Epoch: s.epoch, Turn: s.input, Reason: reason}}
}

// emptyCommit decides a commit without audio of its own: an empty user item joins the
// conversation, its committed event marked Empty. The turn's outcome is the response that runs,
// else the one the engine is about to give to the utterance its VAD ended (its turn not over
// yet: the listen is owed until it is over without one, settleListen), else a listen now.
// NoResponse marks the last case.
func emptyCommit(conv *conversation, rs *responses, speechID string, now float64, epoch int, reason string) (*item, []Event, bool) {
	pending := rs.resp == nil && rs.heardTurn >= 0 && !rs.over(rs.heardTurn)
	listen := rs.resp == nil && !pending
	if pending {
		rs.owedListen = reason
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
	case !rs.over(rs.heardTurn):
		return ""
	}
	rs.owedListen = ""
	return reason
}
