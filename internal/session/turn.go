package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/omniserve/omniserve/internal/requestclient"

	"github.com/omniserve/omniserve/internal/audio"
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
// A response's life after its birth (outputs, pacing, done, cancel) is in response.go; its
// options (response.create's fields) in response_spec.go; its record is closed by endResponse.

// handleCommit commits buffered input as a user item; with a response it precreates the
// response (response.created now, the metrics turn begins here) and runs the engine work as one
// ordered job: append → commit (transcript) → respond.
func (s *Session) handleCommit(eventID string, responseCreate *bool) bool {
	s.sem.abandon(&s.inputAudio)
	respond := s.settings.autoResponse()
	if responseCreate != nil && !s.settings.opts.Transcription {
		respond = *responseCreate
	}
	if !respond {
		return s.commit(eventID, nil)
	}
	o := respOptions{audio: s.settings.cfg.WantAudio(), maxTokens: s.settings.cfg.MaxOutputTokens, format: s.settings.cfg.OutputFormat, tools: s.tools.sessionTools(s.settings.cfg)}
	return s.commit(eventID, &o)
}

// commit commits buffered input as a user item; with o non-nil a response answers it.
func (s *Session) commit(eventID string, o *respOptions) bool {
	respond := o != nil
	if s.settings.autoResponse() {
		// Input already streams into the engine; commit ends the utterance now. The transcript
		// comes back as a Transcript output, which creates the user item.
		if s.engine == nil {
			// Appends open the engine: without one nothing was heard (and opening it now would
			// freeze create_response for no reason).
			s.sendError("input_audio_buffer_commit_empty", "Error committing input audio buffer: buffer too small. Expected at least 100ms of audio, but buffer only has 0.00ms of audio.", eventID, "")
			return false
		}
		if !s.ensureEngine(eventID) {
			return false
		}
		turn := s.input
		s.engine.MarkTurnArrival(turn, s.m.cfg.WallClock())
		if m := turnStats(s.engine); m != nil {
			m.MarkInputEnd(turn, s.m.cfg.WallClock())
		}
		eng := s.engine
		if !s.submitJob(job{run: func(ctx context.Context) jobResult {
			_, err := eng.Commit(ctx, turn, respond)
			if errors.Is(err, audio.ErrEmptyAudio) {
				return jobResult{err: err, errCode: "input_audio_buffer_commit_empty"}
			}
			return jobResult{err: err, errCode: "runtime_append_failed"}
		}}) {
			s.sendError("input_backpressure", "too many pending commits", eventID, "")
			return false
		}
		return true
	}
	if bufMs := s.inputAudio.bufferedMs(); len(s.inputAudio.inputBuf) == 0 || bufMs < 100 {
		s.sendError("input_audio_buffer_commit_empty", fmt.Sprintf(
			"Error committing input audio buffer: buffer too small. Expected at least 100ms of audio, but buffer only has %.2fms of audio.", bufMs), eventID, "")
		return false
	}
	if respond && s.responses.resp != nil {
		s.sendError("conversation_already_has_active_response", fmt.Sprintf(
			"Conversation already has an active response in progress: %s. Wait until the response is finished before creating a new one.", s.responses.resp.id), eventID, "")
		return false
	}
	if !s.ensureEngine(eventID) {
		return false
	}
	buf, started, audioMs := s.inputAudio.takeBuffer() // the forwarded head is already in the engine's ASR
	it := s.commitUserAudioItem(audioMs)
	s.tx.endUtterance(it.ID, s.engineOpts.TranscriptDeltas)
	s.responses.pendingIn++
	s.turnState = turnUserCommitted
	// t0 is the first append of this input (keep-first: a forwarded append may have stamped it).
	turn := s.input
	s.engine.MarkTurnArrival(turn, started)
	if m := turnStats(s.engine); m != nil {
		m.MarkInputEnd(turn, s.m.cfg.WallClock())
	}
	var r *response
	var ro respOptions
	if respond {
		ro = *o
		r = s.beginResponse(-1, ro)
	}
	eng := s.engine
	itemID := it.ID
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
	if !s.submitJob(j) {
		s.sendError("input_backpressure", "too many pending commits", eventID, "")
		if r != nil {
			s.failResponse(r, "input_backpressure", "too many pending commits", nil)
		}
		return false
	}
	if r != nil {
		r.jobbed = true
	}
	return true
}

// commitUserAudioItem adds the committed user audio as an item (with the id speech_started
// announced, if any) and sends input_audio_buffer.committed, conversation.item.added and
// conversation.item.done; the transcript follows with transcription.completed.
func (s *Session) commitUserAudioItem(audioMs float64) *item {
	id := s.conv.freshID(s.inputAudio.speechItemID)
	s.inputAudio.speechItemID = ""
	it := &item{ID: id, Role: "user", Type: "message", Status: "completed", Audio: true, AudioMs: audioMs, CommittedAt: s.m.cfg.WallClock()}
	prev := s.conv.lastID()
	s.conv.insert(it, "")
	if s.settings.opts.Transcription {
		s.tx.opened(it.ID)
	}
	s.send(Event{Epoch: s.epoch, Effect: InputCommitted{PreviousItemID: prev, ItemID: it.ID}})
	s.send(s.conv.added(it, s.epoch, false))
	s.send(s.conv.done(it, s.epoch, false))
	return it
}

func (s *Session) handleCreateResponse(c *CreateResponse) {
	if s.tx.refuse(c.ID, "response.create") {
		return
	}
	o, fe := s.responseOptions(c)
	if fe != nil {
		s.sendError(fe.Code, fe.Message, c.ID, fe.Param)
		return
	}
	if s.responses.resp != nil {
		s.sendError("conversation_already_has_active_response", fmt.Sprintf(
			"Conversation already has an active response in progress: %s. Wait until the response is finished before creating a new one.", s.responses.resp.id), c.ID, "")
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
		s.commit(c.ID, &o)
		return
	}
	if s.responses.pendingIn == 0 && !ownContext {
		s.sendError("response_create_without_input", "there is no committed input to respond to", c.ID, "")
		return
	}
	if !s.ensureEngine(c.ID) {
		return
	}
	s.startModelReply(s.beginResponse(-1, o), o)
}

func newResponseID(sessionID string, epoch int) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("resp-%s-%d-%s", sessionID, epoch, hex.EncodeToString(b[:]))
}

// beginResponse opens a response with options o (begin_response): new ids, turn state,
// metrics turn, and the response.created sequence.
func (s *Session) beginResponse(stageTurn int, o respOptions) *response {
	s.idle.stop()
	s.resetVAD()
	s.turnID++
	// The response answers the input built so far (or the engine's own turn, which already
	// answered it); the next input is a new turn.
	turn := stageTurn
	if turn < 0 {
		turn = s.input
	}
	s.input = max(s.input, turn+1)
	r := &response{
		id: newResponseID(s.id, s.epoch), epoch: s.epoch, turnID: s.turnID, turn: requestclient.NewTurn(turn),
		audio: o.audio, maxTokens: o.maxTokens, playedMs: -1, ackedMs: -1, format: o.format, metadata: o.metadata,
		inputUsage: s.responses.audioUsage(o, s.conv.audioTokens()), outOfBand: o.outOfBand, ownInput: o.input != nil,
		mcp: mcpResp{refs: o.mcpRefs, depth: o.mcpDepth},
	}
	r.itemID = "item_" + r.id
	r.toolCalls = s.tools.answered.take()
	s.responses.resp = r
	s.turnState = turnAssistantGenerating
	if s.engine != nil {
		arrival := s.engine.MarkTurnArrival(turn, s.m.cfg.WallClock())
		r.turn = s.engine.BeginTurn(turn, r.id, r.turnID, arrival)
	}
	if stageTurn >= 0 {
		r.turn.Bind(stageTurn) // the engine's own turn: its outputs already carry it
	}
	it := &item{ID: r.itemID, Role: "assistant", Type: "message", Status: "in_progress", ResponseID: r.id, Audio: r.audio}
	r.item = it
	r.prevItemID = s.conv.lastID()
	if !r.outOfBand {
		s.conv.insert(it, "")
	}
	// The lifecycle events are not fenced (Model false): a cancel that ends the epoch at once
	// must not drop a response.created the client has not been sent yet, or it would get
	// response.done for a response it never saw created. Only the model's output is fenced.
	s.send(Event{Epoch: r.epoch, Effect: ResponseStarted{Response: s.responseObject(r, "in_progress", nil, []Item{}, nil)}})
	added := it.item()
	added.EmptyContent = true
	s.send(Event{Epoch: r.epoch, Effect: OutputItem{Phase: PhaseAdded, ResponseID: r.id, Item: added}})
	if !r.outOfBand {
		s.send(Event{Epoch: r.epoch, Effect: ConversationItem{Phase: PhaseAdded, PreviousItemID: r.prevItemID, Item: added}})
	}
	if r.audio {
		// The part is "audio" in both dialects (what omniserve has always sent here).
		s.send(Event{Epoch: r.epoch, Effect: ContentPart{Phase: PhaseAdded,
			ResponseID: r.id, ItemID: r.itemID, Kind: PartAudio}})
	}
	return r
}

// startModelReply queues the engine response of r (as response.create does).
func (s *Session) startModelReply(r *response, o respOptions) {
	eng := s.engine
	if !s.submitJob(job{responseID: r.id, run: func(ctx context.Context) jobResult {
		if !r.claimEngine() {
			return jobResult{}
		}
		t, err := o.respond(ctx, eng, r.turn)
		return jobResult{turn: t, haveTurn: err == nil, err: err, errCode: "runtime_respond_failed"}
	}}) {
		s.failResponse(r, "input_backpressure", "too many pending engine jobs", nil)
		return
	}
	r.jobbed = true
}

// commitTurn commits the buffer at the end of a turn the VAD decided, answering it with
// create_response (unless a response still runs: interrupt_response false).
func (s *Session) commitTurn() {
	respond := s.settings.cfg.TurnDetection != nil && s.settings.cfg.TurnDetection.CreateResponse && s.responses.resp == nil && !s.settings.opts.Transcription
	s.handleCommit("", &respond)
}
