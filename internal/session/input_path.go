package session

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/requestclient"
)

// The input path as decisions of the core: input_audio_buffer.append from its decoding to the
// engine, in the order the audio takes (append → hear → barge → stream, or keep → forward →
// the end of a turn). Each takes the input audio and what else it reads (hearing: the turn
// detection, the epoch, the clocks' readings) and returns the actions the shell runs.

// hearing is what an append's decisions read besides the input audio: the command's id, the
// turn detection td with auto_response, the session's input format, whether a response is
// active, the epoch and the session's id (the events' fence), the input turn, and the clocks:
// wall (the statistics clock) and now.
type hearing struct {
	eventID   string
	td        *TurnDetection
	auto      bool
	format    AudioFormat
	active    bool
	epoch     int
	sessionID string
	input     int
	wall      float64
	now       time.Time
}

// The input path's inputs.
type (
	// appendAudio is input_audio_buffer.append.
	appendAudio struct{ c *AppendAudio }
	// keepAudio keeps pcm, an append of a manual turn (or of the session's own server_vad), in
	// the uncommitted buffer; stopped says the VAD heard its speech stop.
	keepAudio struct {
		eventID string
		pcm     []float32
		stopped bool
	}
	// turnEnd commits the turn when the VAD ended it (stopped: server_vad's end of speech,
	// semantic_vad's end-of-turn estimate or pause timer), answering it with create_response
	// (unless a response still runs: interrupt_response false).
	turnEnd struct{ stopped bool }
	// pauseEnd ends the turn if semantic_vad's pause ends it now (semState.end).
	pauseEnd struct{}
	// idleFired is turn_detection.idle_timeout_ms's timer (idleFollowUp.fired).
	idleFired struct{}
	// clearInput is input_audio_buffer.clear: the buffer and whatever of it the ASR has heard
	// are dropped.
	clearInput struct{ eventID string }
	// unforward makes the engine forget the forwarded head of the input buffer; the buffer
	// itself is kept (the next commit feeds all of it).
	unforward struct{ eventID string }
	// trimHistory drops the oldest items over the history budget (conversation.trimmed).
	trimHistory struct{}
)

func (appendAudio) isAction() {}
func (keepAudio) isAction()   {}
func (turnEnd) isAction()     {}
func (pauseEnd) isAction()    {}
func (idleFired) isAction()   {}
func (pauseEnd) isInput()     {}
func (idleFired) isInput()    {}
func (clearInput) isAction()  {}
func (unforward) isAction()   {}
func (trimHistory) isAction() {}
func (appendAudio) isInput()  {}
func (keepAudio) isInput()    {}
func (turnEnd) isInput()      {}
func (clearInput) isInput()   {}
func (unforward) isInput()    {}
func (trimHistory) isInput()  {}

// The input path's timer calls: the semantic_vad pause (semState) and the idle follow-up.
type (
	// dropPause forgets a semantic_vad pause that had not ended the turn.
	dropPause struct{}
	// beginPause starts a semantic_vad pause at endMs of the input (inputMs heard), under rule.
	beginPause struct {
		endMs, inputMs float64
		rule           SemanticEndpointing
		now            time.Time
	}
	// stopIdle ends the idle follow-up: the user spoke, or a response begins.
	stopIdle struct{}
)

// A timerCall arms or stops one of the timers of the actor's seams.
type timerCall interface {
	action
	apply(sem *semState, idle *idleFollowUp)
}

func (dropPause) isAction()  {}
func (beginPause) isAction() {}
func (stopIdle) isAction()   {}

func (dropPause) apply(sem *semState, _ *idleFollowUp) { sem.drop() }
func (b beginPause) apply(sem *semState, _ *idleFollowUp) {
	sem.begin(b.endMs, b.inputMs, b.rule, b.now)
}
func (stopIdle) apply(_ *semState, idle *idleFollowUp) { idle.stop() }

// The input path's engine calls.
type (
	// markArrival stamps the input turn's t0 (keep-first).
	markArrival struct {
		turn int
		at   float64
	}
	// markInputEnd stamps the end of the input turn's speech.
	markInputEnd struct {
		turn int
		at   float64
	}
	// bargedIn records a barge-in's latency from the onset's own append.
	bargedIn struct{ latency float64 }
	// streamAudio appends pcm to the input turn (auto_response: the engine's VAD endpoints).
	streamAudio struct {
		eventID string
		turn    int
		pcm     []float32
	}
	// forwardAhead streams the uncommitted buffer of in into the engine as turn ahead of the
	// commit, unless the session is busy (engineLink.forward).
	forwardAhead struct {
		in   *inputAudio
		turn int
		busy bool
		wall float64
	}
)

func (markArrival) isAction()  {}
func (markInputEnd) isAction() {}
func (bargedIn) isAction()     {}
func (streamAudio) isAction()  {}
func (forwardAhead) isAction() {}

func (m markArrival) call(l *engineLink, _ requestclient.Fence) []action {
	l.engine.MarkTurnArrival(m.turn, m.at)
	return nil
}

func (m markInputEnd) call(l *engineLink, _ requestclient.Fence) []action {
	if st := turnStats(l.engine); st != nil {
		st.MarkInputEnd(m.turn, m.at)
	}
	return nil
}

func (b bargedIn) call(l *engineLink, _ requestclient.Fence) []action {
	if st := turnStats(l.engine); st != nil {
		st.ObserveBargeIn(b.latency)
	}
	return nil
}

func (a streamAudio) call(l *engineLink, _ requestclient.Fence) []action {
	err := l.engine.AppendAudio(l.ctx, a.turn, a.pcm)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, requestclient.ErrInputBackpressure):
		return []action{errorOut{code: "input_backpressure", msg: err.Error(), eventID: a.eventID, param: "audio"}}
	}
	return []action{errorOut{code: "runtime_append_failed", msg: err.Error(), eventID: a.eventID}}
}

func (f forwardAhead) call(l *engineLink, _ requestclient.Fence) []action {
	l.forward(f.in, f.turn, f.busy, func() float64 { return f.wall }, l.obs.log)
	return nil
}

// append is input_audio_buffer.append c under h, in the order the audio takes: decoded and
// cleaned onto the input clock (takeAppend); then, when turn_detection is set, heard by the
// overlap VAD (hearAppend) with a possible barge-in on the response (barge); then streamed to the
// engine under auto_response, or else kept in the buffer until its commit (keepAudio). Without
// turn detection no VAD listens (auto_response needs turn_detection too), so nothing is
// announced and nothing barges in; a VAD a session.update turned off is freed.
func (in *inputAudio) append(c *AppendAudio, h hearing) []action {
	pcm, fe := in.takeAppend(c.Data, h.format, c.Format)
	if fe != nil {
		return []action{errorOut{code: fe.Code, msg: fe.Message, eventID: c.ID, param: fe.Param}}
	}
	if len(pcm) == 0 {
		return nil
	}
	if h.td == nil {
		in.closeVAD()
		if in.echo != nil {
			in.echo.Process(pcm) // the canceller's clock follows the input whether a VAD listens or not
		}
		return []action{keepAudio{eventID: c.ID, pcm: pcm}}
	}
	vr, acts := in.hearAppend(pcm, h)
	acts = append(acts, barge(vr, h, in.onsetAt, in.overlap(vr, h.active, msOf(len(pcm))))...)
	if !h.auto {
		return append(acts, keepAudio{eventID: c.ID, pcm: pcm, stopped: vr.stopped})
	}
	// auto_response: straight to the engine, whose VAD endpointing takes the turns; the
	// append's first speech is the turn's t0.
	var then []action
	if at, ok := in.speechArrival(vr, h.wall); ok {
		then = append(then, markArrival{turn: h.input, at: at})
	}
	return append(acts, openEngine{eventID: c.ID, then: append(then, streamAudio{eventID: c.ID, turn: h.input, pcm: pcm})})
}

// hearAppend hears one taken append (listen) under h and, under server_vad, announces
// speech_started / speech_stopped with their positions in the session's input audio and the id
// the user item will get on commit; semantic_vad's pauses go to semState instead (on
// auto-response speech_stopped waits for the engine's speak decision, semvad_duplex.go).
func (in *inputAudio) hearAppend(pcm []float32, h hearing) (vadResult, []action) {
	res, edges, err := in.listen(pcm, h.td, nil, h.auto, h.wall)
	switch {
	case errors.Is(err, errNoOverlapVAD):
		return vadResult{}, []action{logLine{warn: true, msg: "no overlap vad", fields: []zap.Field{zap.Error(err)}}}
	case err != nil:
		return vadResult{}, []action{logLine{msg: "overlap vad", fields: []zap.Field{zap.Error(err)}}}
	}
	var acts []action
	for _, e := range edges {
		switch {
		case e.resumed:
			acts = append(acts, dropPause{}) // the same turn goes on
		case e.pause && engineEndsTurns(h.td, h.auto):
		case e.pause:
			acts = append(acts, beginPause{endMs: float64(e.atMs), inputMs: in.inputMs, rule: SemanticParams(h.td.Eagerness), now: h.now})
		case e.started:
			acts = append(acts, emit{evs: []Event{{Epoch: h.epoch, Effect: InputSpeech{Phase: PhaseStarted, AudioMs: e.atMs, ItemID: in.speechItemID}}}})
		default:
			acts = append(acts, emit{evs: []Event{{Epoch: h.epoch, Effect: InputSpeech{Phase: PhaseStopped, AudioMs: e.atMs, ItemID: in.speechItemID}}}},
				markInputEnd{turn: h.input, at: h.wall})
		}
	}
	return res, acts
}

// barge runs the overlap policy on an append heard as vr (bargeDecision), overlapMs the speech
// over the active response so far: speech ends the idle follow-up; under interrupt_response it
// cancels the active response, the barge-in timed from onset, its own append (0: unknown); an
// engine that owns the turns cancels it once the overlap is substantial (reason barge_in).
func barge(vr vadResult, h hearing, onset, overlapMs float64) []action {
	heard, cancel := bargeDecision(vr, h, overlapMs)
	var acts []action
	if heard {
		acts = append(acts, stopIdle{})
	}
	switch cancel {
	case "":
		return acts
	case bargeSustained:
		return append(acts, emit{evs: []Event{{Epoch: h.epoch, Effect: OverlapDecision{
			SessionID: h.sessionID, Epoch: h.epoch, Policy: policyListenOnly, Action: "barge_in", Reason: bargeSustained}}}},
			cancelActive{source: "turn_detected", wire: "barge_in", notify: true})
	}
	acts = append(acts, emit{evs: []Event{{Epoch: h.epoch, Effect: OverlapDecision{
		SessionID: h.sessionID, Epoch: h.epoch, Policy: policyBargeIn, Action: "barge_in", Reason: bargeSpeech}}}},
		cancelActive{source: "turn_detected", wire: "turn_detected", notify: true})
	if onset > 0 {
		acts = append(acts, bargedIn{latency: h.wall - onset})
	}
	return acts
}

// keep keeps k's audio in the uncommitted buffer (at most maxBytes) at wall: the first chunk of
// a buffer opens the engine ahead of the commit (ahead.go), what may go ahead is forwarded as
// turn unless the session is busy, and the turn ends if the VAD ended it (turnEnd). ok is
// false when the buffer is full (the error is the action).
func (in *inputAudio) keep(k keepAudio, maxBytes int, wall float64, turn int, busy bool) (acts []action, ok bool) {
	first, ok := in.buffer(k.pcm, maxBytes, wall)
	if !ok {
		return []action{errorOut{code: "input_backpressure", msg: fmt.Sprintf("more than %d bytes of input are pending", maxBytes), eventID: k.eventID, param: "audio"}}, false
	}
	if first {
		acts = append(acts, openAhead{}) // tried once per buffer
	}
	// server_vad commits the buffer at the end of speech (semantic_vad at the end of the
	// turn), and with create_response answers it (unless a response is still running:
	// interrupt_response false).
	acts = append(acts, forwardAhead{in: in, turn: turn, busy: busy, wall: wall})
	if k.stopped {
		return append(acts, turnEnd{stopped: true}), true
	}
	return append(acts, pauseEnd{}), true
}

// openAhead opens the engine stream ahead of the first commit (engineLink.ahead).
type openAhead struct{}

func (openAhead) isAction() {}

// opened is what follows the stream's opening ahead, ok or not: the tools learn the new stream.
func (openAhead) opened(ok bool) []action {
	if !ok {
		return nil
	}
	return []action{syncTools{}}
}

// trimmed drops the oldest items while the conversation's text exceeds limit bytes, keeping
// the item keep (the active response's); each goes as conversation.item.deleted at epoch
// (reason "history_budget").
func (c *conversation) trimmed(limit int, keep string, epoch int) []action {
	var acts []action
	for _, it := range c.trim(limit, keep) {
		acts = append(acts, emit{evs: []Event{{Epoch: epoch, Effect: ItemDeleted{ItemID: it.ID, Reason: "history_budget"}}}},
			logLine{msg: "conversation over its byte budget: dropped the oldest item",
				fields: []zap.Field{zap.String("item_id", it.ID), zap.Int("max_history_bytes", limit)}})
	}
	return acts
}

// decideInput is the core's step for the input path's inputs (decide's other half).
func (s *Session) decideInput(in input) []action {
	switch in := in.(type) {
	case appendAudio:
		return s.inputAudio.append(in.c, hearing{eventID: in.c.ID, td: s.settings.cfg.TurnDetection, auto: s.settings.autoResponse(),
			format: s.settings.cfg.InputFormat, active: s.responses.resp != nil, epoch: s.epoch, sessionID: s.id, input: s.input,
			wall: s.m.cfg.WallClock(), now: time.Now()})
	case keepAudio:
		acts, ok := s.inputAudio.keep(in, s.m.cfg.MaxPendingInputBytes, s.m.cfg.WallClock(), s.input, s.responses.resp != nil || s.jobQueue.jobsOut > 0)
		s.responses.userSpeaks(ok)
		return acts
	case turnEnd:
		if in.stopped {
			return []action{commitInput{respond: vadResponds(s.settings.cfg, s.settings.opts, s.responses.resp != nil)}}
		}
	case pauseEnd:
		return []action{turnEnd{stopped: s.sem.end(s.link.ctx, semMoment{&s.inputAudio, s.settings.semanticVAD(), s.link.engine, s.input})}}
	case idleFired:
		busy := s.responses.resp != nil || s.link.engine == nil || s.attachment.detached
		st := s.idle.fired(&s.inputAudio, s.settings.cfg.TurnDetection, busy, s.settings.autoResponse(), s.epoch)
		return st.plan(s.settings.cfg.replyOptions(s.settings.cfg.MaxOutputTokens))
	case clearInput:
		s.sem.abandon(&s.inputAudio)
		s.run(unforward(in))
		s.inputAudio.clearBuffer()
		s.tx.dropOpen(&s.inputAudio.speechItemID, s.link.opts.TranscriptDeltas) // input transcription deltas of the dropped audio are void
		s.run(markCleared{turn: s.input})
		s.input++ // the next input is a new turn: rows of the cleared one are dropped on arrival
		s.conv.turn = s.input
	case unforward:
		discarded, err := s.link.unforward(&s.inputAudio)
		if err != nil {
			return []action{errorOut{code: "runtime_append_failed", msg: err.Error(), eventID: in.eventID}}
		}
		if discarded {
			s.tx.endUtterance("", s.link.opts.TranscriptDeltas)
		}
	case trimHistory:
		return s.conv.trimmed(s.m.cfg.MaxHistoryBytes, s.responses.activeItemID(), s.epoch)
	}
	return nil
}

// markCleared tells the engine's statistics that the input turn was cleared.
type markCleared struct{ turn int }

func (markCleared) isAction() {}

func (m markCleared) call(l *engineLink, _ requestclient.Fence) []action {
	if st := turnStats(l.engine); st != nil {
		st.ClearTurnInput(m.turn)
	}
	return nil
}
