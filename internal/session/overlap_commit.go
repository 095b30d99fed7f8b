package session

import "context"

// A commit while a response is active, in a dialect with vllm-omni's overlap tiers
// (CommitInput.OverlapTiers): what the user said over the response decides what the commit is.
//   - Speech over it for at most OverlapShortAckMs ("mm-hm", "right") is an acknowledgement:
//     the audio is dropped (the engine forgets it, as input_audio_buffer.clear), an empty user
//     item is committed, its committed event marked Empty, OverlapAck and NoResponse, and the
//     running response goes on: it is the turn's outcome. vllm-omni drops the acknowledgement's
//     audio and transcript from the model's history the same way.
//   - Longer speech (up to OverlapBargeInMs, where the engine has already cut the response:
//     bargeDecision) is a turn of its own: committed as always, answered after the response that
//     runs (the dialect marks its committed event response_create_deferred).
// No speech over the response (its audio came before it, or was not speech) leaves the commit
// as it is: a commit of audio the engine already took is accepted (commit_outcome.go). The
// speech counted is that since the last utterance ended: a remark the engine's own VAD ended
// (its transcript came) is the engine's to answer, and a commit after it has none of its own.

// OverlapShortAckMs is the most speech over a response that a commit takes as an
// acknowledgement: vllm-omni's overlap_short_ack_ms.
const OverlapShortAckMs = 700

// overlapTier is what a commit during a response is.
type overlapTier int

const (
	tierTurn     overlapTier = iota // a commit as always (no response runs, no speech over it, or no tiers)
	tierAck                         // an acknowledgement: no response for it
	tierDeferred                    // a turn of its own, answered after the running response
)

// overlapCommit is what a commit's tier reads: the dialect's rule (tiers), whether a response
// is active, the speech heard over it since the last commit (inputAudio.overlapSpeechMs), and
// whether the engine took the input as it came (auto_response) and can forget it (an
// AudioDiscarder): an acknowledgement must leave no audio behind for the next turn.
type overlapCommit struct {
	tiers, active bool
	overlapMs     float64
	streamed      bool
	discards      bool
}

// commitTier decides the tier of a commit.
func commitTier(c overlapCommit) overlapTier {
	switch {
	case !c.tiers || !c.active || c.overlapMs <= 0:
		return tierTurn
	case c.overlapMs <= OverlapShortAckMs && c.streamed && c.discards:
		return tierAck
	}
	return tierDeferred
}

// ackCommit is the acknowledgement of the commit eventID (tierAck) at now: the announced
// speech segment closed (speech_stopped), the input cleared, the engine made to forget the
// audio it was streamed (a job, after the engine work queued before it), and an empty user
// item committed with the flags of an acknowledgement. It returns that item and the actions.
func ackCommit(conv *conversation, in *inputAudio, eng AudioDiscarder, eventID string, epoch int, now float64) (*item, []action) {
	stopped := in.resetVAD(epoch)
	it, evs := conv.commitAudio(in.takeSpeechID(), 0, now, epoch)
	for i, ev := range evs {
		if c, ok := ev.Effect.(InputCommitted); ok {
			c.Empty, c.OverlapAck, c.NoResponse = true, true, true
			evs[i].Effect = c
		}
	}
	discard := job{run: func(ctx context.Context) jobResult {
		return jobResult{err: eng.DiscardAudio(ctx), errCode: "runtime_append_failed"}
	}}
	return it, []action{
		emit{evs: stopped},
		clearInput{eventID: eventID},
		queueJob{job: discard, full: []action{errorOut{code: "input_backpressure", msg: "too many pending commits", eventID: eventID}}},
		emit{evs: evs},
		trimHistory{},
	}
}
