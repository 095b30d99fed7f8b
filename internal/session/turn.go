package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
)

// How a turn is born. A user turn becomes a response in one of three ways, and each ends in
// beginResponse here, which gives the turn its ids, its metrics turn and its response.created:
//   - a commit, by the client (input_audio_buffer.commit), by server VAD or semantic_vad at the
//     end of speech (input.go, semvad.go), or by the idle timeout (idle.go): handleCommit →
//     commit, which adds the user item and queues append → transcript → respond as one job;
//   - response.create (handleCreateResponse), which commits what is buffered first, or answers
//     the committed input, or its own input out of band;
//   - the engine's own speak decision in an auto-response session (outputs.go), which reports a
//     turn the engine has already started.
// A response's life after its birth (outputs in response.go; pacing, done, cancel and failure as
// the decisions of lifecycle.go); its options (response.create's fields) in response_spec.go;
// its record is closed by the endActive step (responses.ended, the endTurn call).

// handleCommit commits buffered input as a user item; with a response it precreates the
// response (response.created now, the metrics turn begins here) and runs the engine work as one
// ordered job: append → commit (transcript) → respond.
// A silence commit (vllm-omni's is_speech: false, commit_outcome.go) drops the audio and ends the
// turn in order with the engine work before it. In a dialect with overlap tiers, a commit of a
// short remark over the running response is an acknowledgement (overlap_commit.go).
func (s *Session) handleCommit(c *CommitInput) bool {
	s.sem.abandon(&s.inputAudio)
	overlapMs := s.inputAudio.overlapSpeechMs
	s.inputAudio.overlapSpeechMs = 0 // each commit's own
	disc, _ := s.link.engine.(AudioDiscarder)
	if commitTier(overlapCommit{tiers: c.OverlapTiers && !c.Silence, active: s.responses.resp != nil, overlapMs: overlapMs,
		streamed: s.settings.autoResponse(), discards: disc != nil}) == tierAck {
		it, acts := ackCommit(&s.conv, &s.inputAudio, disc, c.ID, s.epoch, s.m.cfg.WallClock())
		s.tx.committed(it.ID)
		s.run(acts...)
		s.tx.completed(it.ID, duplex.Transcription{})
		return true
	}
	if c.Silence {
		s.run(clearInput{eventID: c.ID})
		if !s.submitJob(job{run: func(context.Context) jobResult { return jobResult{consumed: ReasonSilence} }}) {
			s.sendError("input_backpressure", "too many pending commits", c.ID, "")
			return false
		}
		return true
	}
	respond := s.settings.autoResponse()
	if c.ResponseCreate != nil && !s.settings.opts.Transcription {
		respond = *c.ResponseCreate
	}
	if !respond {
		return s.commit(c.ID, nil, c.AcceptConsumed)
	}
	o := respOptions{audio: s.settings.cfg.WantAudio(), maxTokens: s.settings.cfg.MaxOutputTokens, format: s.settings.cfg.OutputFormat, tools: s.tools.sessionTools(s.settings.cfg)}
	return s.commit(c.ID, &o, c.AcceptConsumed)
}

// commit commits buffered input as a user item; with o non-nil a response answers it. Under
// auto_response the input already streams into the engine (commitStreamed); otherwise the
// buffer becomes the user item here and one ordered job feeds it to the engine: append →
// commit (transcript) → respond (commitJob).
// acceptConsumed: a commit of audio the engine has already taken is accepted (commitStreamed).
func (s *Session) commit(eventID string, o *respOptions, acceptConsumed bool) bool {
	if s.settings.autoResponse() {
		return s.commitStreamed(eventID, o != nil, acceptConsumed)
	}
	if ev := s.inputAudio.commitRefusal(eventID, s.epoch); ev != nil {
		s.send(*ev)
		return false
	}
	if ev := s.responses.activeRefusal(eventID, s.epoch); o != nil && ev != nil {
		s.send(*ev)
		return false
	}
	if !s.ensureEngine(eventID) {
		return false
	}
	buf, started, audioMs := s.inputAudio.takeBuffer() // the forwarded head is already in the engine's ASR
	it, evs := s.conv.commitAudio(s.inputAudio.takeSpeechID(), audioMs, s.m.cfg.WallClock(), s.epoch)
	s.tx.committed(it.ID)
	s.send(evs...)
	s.tx.endUtterance(it.ID, s.link.opts.TranscriptDeltas)
	s.responses.pendingIn++
	s.responses.turnState = turnUserCommitted
	// t0 is the first append of this input (keep-first: a forwarded append may have stamped it).
	turn := s.input
	s.link.engine.MarkTurnArrival(turn, started)
	if m := turnStats(s.link.engine); m != nil {
		m.MarkInputEnd(turn, s.m.cfg.WallClock())
	}
	var r *response
	var ro respOptions
	if o != nil {
		ro = *o
		r = s.beginResponse(-1, ro)
	}
	if !s.submitJob(commitJob(s.link.engine, turn, buf, it.ID, r, ro)) {
		s.sendError("input_backpressure", "too many pending commits", eventID, "")
		if r != nil {
			s.run(failActive{r: r, code: "input_backpressure", msg: "too many pending commits"})
		}
		return false
	}
	if r != nil {
		r.jobbed = true
	}
	return true
}

// commitStreamed commits the utterance an auto_response session streamed into the engine: the
// commit ends it now, and its transcript comes back as a Transcript output, which creates the
// user item. With acceptConsumed a commit whose audio the engine has already taken is accepted
// (jobResult.consumed) rather than refused as empty.
func (s *Session) commitStreamed(eventID string, respond, acceptConsumed bool) bool {
	if s.link.engine == nil {
		// Appends open the engine: without one nothing was heard (and opening it now would
		// freeze create_response for no reason).
		s.sendError("input_audio_buffer_commit_empty", "Error committing input audio buffer: buffer too small. Expected at least 100ms of audio, but buffer only has 0.00ms of audio.", eventID, "")
		return false
	}
	turn := s.input
	s.link.engine.MarkTurnArrival(turn, s.m.cfg.WallClock())
	if m := turnStats(s.link.engine); m != nil {
		m.MarkInputEnd(turn, s.m.cfg.WallClock())
	}
	eng := s.link.engine
	if !s.submitJob(job{run: func(ctx context.Context) jobResult {
		_, err := eng.Commit(ctx, turn, respond)
		if errors.Is(err, audio.ErrEmptyAudio) && acceptConsumed {
			return jobResult{consumed: ReasonNoOutput}
		}
		if errors.Is(err, audio.ErrEmptyAudio) {
			return jobResult{err: err, errCode: "input_audio_buffer_commit_empty"}
		}
		return jobResult{err: err, errCode: "runtime_append_failed"}
	}}) {
		s.sendError("input_backpressure", "too many pending commits", eventID, "")
		return false
	}
	if respond {
		s.timers.closeHold.decided() // the engine decides this commit's outcome: a close waits for it
	}
	return true
}

// commitJob is the engine job of a buffered commit: the buffer buf appended to turn on eng, the
// commit with the transcript of item itemID, and with a response r (nil: none) its engine
// response under ro, unless r was cancelled before the job claimed it.
func commitJob(eng Engine, turn int, buf [][]float32, itemID string, r *response, ro respOptions) job {
	j := job{run: func(ctx context.Context) jobResult {
		res := jobResult{itemID: itemID, errCode: "runtime_append_failed"}
		for _, pcm := range buf {
			if res.err = eng.AppendAudio(ctx, turn, pcm); res.err != nil {
				return res
			}
		}
		if res.transcript, res.err = eng.Commit(ctx, turn, false); res.err != nil {
			return res
		}
		if r != nil && r.claimEngine() {
			res.turn, res.err = ro.respond(ctx, eng, r.turn)
			res.haveTurn = res.err == nil
			res.errCode = "runtime_respond_failed"
		}
		return res
	}}
	if r != nil {
		j.responseID = r.id
	}
	return j
}

func (s *Session) handleCreateResponse(c *CreateResponse) {
	if s.tx.refuse(c.ID, "response.create") {
		return
	}
	o, fe := responseOptions(c, &s.settings, &s.conv, &s.tools, s.m)
	if fe != nil {
		s.sendError(fe.Code, fe.Message, c.ID, fe.Param)
		return
	}
	if ev := s.responses.activeRefusal(c.ID, s.epoch); ev != nil {
		s.send(*ev)
		return
	}
	// An out-of-band response, or one with its own input, answers what it was given: the
	// input buffer stays as it is, and no committed input is needed.
	ownContext := o.outOfBand || o.input != nil
	// Buffered audio is committed for the response only when nothing committed awaits an
	// answer (a client that appends and asks, never committing). After a commit the response
	// answers that input and the buffer keeps what came since for the next commit, as OpenAI's
	// API does: over WebRTC the microphone never stops, and the packets landing between a
	// push-to-talk client's commit and its response.create are not a second user turn.
	if len(s.inputAudio.inputBuf) > 0 && s.responses.pendingIn == 0 && !s.settings.autoResponse() && !ownContext {
		s.commit(c.ID, &o, false)
		return
	}
	// With nothing committed since the last reply the response answers the conversation as it
	// stands (its instructions too), as OpenAI's does: a greeting before the user speaks
	// (LiveKit's generate_reply), or a second reply to the same input.
	if !s.ensureEngine(c.ID) {
		return
	}
	s.run(replyJob(s.beginResponse(-1, o), o, s.link.engine))
}

func newResponseID(sessionID string, epoch int) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("resp-%s-%d-%s", sessionID, epoch, hex.EncodeToString(b[:]))
}

// beginResponse opens a response with options o (begin_response, responses.begin): the idle
// follow-up and an undecided semantic_vad pause are forgotten, the VAD starts afresh, and the
// response gets its ids, its engine turn and its response.created sequence. stageTurn is the
// engine's own turn it answers (-1: the input built so far).
func (s *Session) beginResponse(stageTurn int, o respOptions) *response {
	s.idle.stop()
	s.sem.drop() // an undecided semantic_vad pause is forgotten
	reset := s.inputAudio.resetVAD(s.epoch)
	r, next, acts := s.responses.begin(beginning{stageTurn: stageTurn, input: s.input, epoch: s.epoch, o: o,
		id: newResponseID(s.id, s.epoch), calls: s.tools.answered.take(), now: s.m.cfg.WallClock()}, &s.conv, &s.settings)
	s.input = next
	s.conv.turn = next
	s.run(append([]action{emit{evs: reset}}, acts...)...)
	return r
}
