package live

import (
	"strings"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// inputState is what the translator knows of the user's side: whether they are speaking (the
// session's VAD edges), and the input transcript sent per item.
type inputState struct {
	speaking      bool
	speechStartMs int64
	// decideByMs: the user's turn ended and the engine has not decided on it yet (a reply or
	// a listen), at most until this timeline position (0: nothing to wait for). A task's
	// out-of-band response started meanwhile would be cut short by the engine's reply.
	decideByMs int64
	sent       map[string]string
	lastEndMs  int64
	any        bool // words were sent
}

// outputState is the output track: whether a reply is active, where on the timeline the track
// is, the last frame's place (its transcript is placed there), and the 16 kHz resampler.
type outputState struct {
	active bool
	// ours: the next reply to start is one the translator asked for (commentary, an
	// acknowledgement).
	ours bool
	// activeID is the active reply's id, activeOurs whether the translator asked for it.
	activeID        string
	activeOurs      bool
	newReply, spoke bool // the next words are a new reply's; words were spoken before
	trackMs         float64
	frameStartMs    float64
	frameMs         float64
	resampler       *audio.Resampler
	contextTokens   int // tokens in the session's context after its last reply
	contextReported bool
}

// decisionWaitMs bounds the wait for the engine's decision on a user's turn (timeline ms).
const decisionWaitMs = 2000

// deciding reports whether the engine may still decide on the user's last turn at timeline
// position now.
func (in *inputState) deciding(now int64) bool { return in.decideByMs > 0 && now < in.decideByMs }

// EncodeAll is the server events of effect e: none for what Live does not show (items,
// responses, buffers), sometimes several (a delegation and its task). A Responses task's
// effects are its response.event stream (tasks.go), never the track's.
func (t *Translator) EncodeAll(e session.Effect) []protocol.ServerEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	if evs, ok := t.tasks.effect(e); ok {
		return evs
	}
	switch e := e.(type) {
	case session.OutputDelta:
		return t.outputDelta(e)
	case session.Transcription:
		return t.inputTranscript(e)
	case session.InputSpeech:
		return t.speech(e)
	case session.ResponseStarted:
		t.responseStarted(e)
	case session.ResponseDone:
		t.responseDone(e)
	case session.TurnDecision:
		t.in.decideByMs = 0
	case session.Error:
		return t.sessionError(e)
	}
	return t.encodeSession(e)
}

// Encode implements the connection's dialect for a caller that takes one event per effect: the
// first of EncodeAll's.
func (t *Translator) Encode(e session.Effect) (protocol.ServerEvent, bool) {
	evs := t.EncodeAll(e)
	if len(evs) == 0 {
		return nil, false
	}
	return evs[0], true
}

// encodeSession: the session's own effects.
func (t *Translator) encodeSession(e session.Effect) []protocol.ServerEvent {
	switch e := e.(type) {
	case session.SessionCreated:
		t.sessionID = SessionID(e.View.ID)
		t.expiresAt = e.View.ExpiresAt.Unix()
	case session.SessionUpdated:
		if t.phase != starting {
			return nil // Live's own updates are answered by the translator
		}
		t.phase = started
		return []protocol.ServerEvent{sessionEvent{kind: "session.started", ClientEventID: t.clientStartID, Session: t.resource()}}
	case session.SessionClosed:
		if t.phase == notStarted {
			return nil // a socket that never started gets nothing, not even its end
		}
		return []protocol.ServerEvent{t.closed(e.Reason)}
	}
	return nil
}

// resource is the session's SessionResource now.
func (t *Translator) resource() Resource {
	r := t.cfg.res
	r.ID, r.ExpiresAt, r.Status = t.sessionID, t.expiresAt, "active"
	return r
}

// closeReasons are Live's reasons for the session's.
var closeReasons = map[string]string{session.ReasonClientClose: "close_requested", session.ReasonTimeout: "expired",
	session.ReasonExpired: "expired"}

// closed is session.closed: the reason, the final snapshot and usage.
func (t *Translator) closed(reason string) protocol.ServerEvent {
	live, ok := closeReasons[reason]
	if !ok {
		live = "connection_lost"
	}
	return closedEvent{ClientEventID: t.deleg.closeID, Reason: live, Session: t.resource(), Usage: Usage{Seconds: t.tl.seconds()}}
}

// usage is session.usage.updated now: the timeline's seconds, and how full the context is.
func (t *Translator) usage() protocol.ServerEvent {
	ev := usageEvent{Usage: Usage{Seconds: t.tl.seconds()}}
	if n := t.opts.ContextTokens; n > 0 {
		ev.ContextWindow = &ContextWindow{UsageRatio: min(1, float64(t.out.contextTokens)/float64(n))}
	}
	return ev
}

// responseDone notes a reply's end: the track is free, and the context's size is its usage's
// text tokens (what the thinker read and wrote: the KV sequence's length).
func (t *Translator) responseDone(e session.ResponseDone) {
	t.out.active = false
	if u := e.Response.Usage; u != nil && u.InputText+u.OutputText > 0 {
		t.out.contextTokens = u.InputText + u.OutputText
	}
}

// outputDelta is a paced frame of the reply (its audio, in the session's format, on the output
// track) or its transcript, placed where the frame starts on the track.
func (t *Translator) outputDelta(e session.OutputDelta) []protocol.ServerEvent {
	switch e.Kind {
	case session.PartAudio:
		now := float64(t.tl.ms())
		t.out.frameStartMs = max(t.out.trackMs, now)
		t.out.frameMs = e.DurationMs
		t.out.trackMs = t.out.frameStartMs + e.DurationMs
		if t.media {
			return []protocol.ServerEvent{mediaAudio(e),
				reflectedOutput{Delta: e.Audio, StartMs: int64(t.out.frameStartMs), EndMs: int64(t.out.trackMs)}}
		}
		return []protocol.ServerEvent{audioDelta{Delta: t.out.convert(e.Audio)}}
	case session.PartTranscript, session.PartText:
		if e.Text == "" {
			return nil
		}
		start := int64(t.out.frameStartMs)
		text := e.Text
		if t.out.newReply {
			text, t.out.newReply = spaced(t.out.spoke, text), false
		}
		t.out.spoke = true
		return []protocol.ServerEvent{transcriptDelta{kind: "session.output_transcript.delta", Delta: text,
			StartMs: start, EndMs: start + int64(t.out.frameMs)}}
	}
	return nil
}

// convert is a frame of the talker's audio in the session's format: as it is, or PCM16 at
// 16 kHz through the session's streaming resampler.
func (o *outputState) convert(pcm []byte) []byte {
	if o.resampler == nil {
		return pcm
	}
	f, err := audio.PCM16BytesToFloat32(nil, pcm)
	if err != nil {
		return pcm // an odd byte: cannot happen for the talker's frames
	}
	return audio.Float32ToPCM16Bytes(nil, o.resampler.Process(nil, f))
}

// speech notes the user's speech edges; the end of a turn is where the test hook's scripted
// decider delegates.
func (t *Translator) speech(e session.InputSpeech) []protocol.ServerEvent {
	switch e.Phase {
	case session.PhaseStarted:
		t.in.speaking, t.in.speechStartMs = true, int64(e.AudioMs)
	case session.PhaseStopped:
		t.in.speaking, t.in.decideByMs = false, t.tl.ms()+decisionWaitMs
		if t.deleg.armed && t.cfg != nil {
			return t.delegate(int64(e.AudioMs))
		}
	}
	return nil
}

// inputTranscript is the user's words as session.input_transcript.delta: the session's deltas
// are already the recognizer's stable words (audio.StableDelta); at the item's completion the
// final words past those sent are flushed, and a final that revised sent words adds nothing
// (Live cannot retract).
func (t *Translator) inputTranscript(e session.Transcription) []protocol.ServerEvent {
	if t.in.sent == nil {
		t.in.sent = map[string]string{}
	}
	sent := t.in.sent[e.ItemID]
	var delta string
	switch e.Phase {
	case session.PhaseDelta:
		delta = e.Text
		t.in.sent[e.ItemID] = sent + e.Text
	case session.PhaseCompleted:
		delete(t.in.sent, e.ItemID)
		if strings.HasPrefix(e.Text, sent) {
			delta = e.Text[len(sent):]
		}
	default:
		return nil
	}
	if strings.TrimSpace(delta) == "" {
		return nil
	}
	if sent == "" {
		// An utterance's first words: they start where its speech did, a word apart from the
		// utterances before (Live's transcript is one stream per speaker).
		t.in.lastEndMs = max(t.in.lastEndMs, t.in.speechStartMs)
		delta = spaced(t.in.any, delta)
	}
	t.in.any = true
	start, end := t.in.lastEndMs, max(t.in.lastEndMs, t.tl.ms())
	t.in.lastEndMs = end
	return []protocol.ServerEvent{transcriptDelta{kind: "session.input_transcript.delta", Delta: delta, StartMs: start, EndMs: end}}
}

// sessionError is the session's error in Live's shape. The start's refusal reopens the start;
// the refusals of the translator's own commands carry no client event (a commentary refused
// because a reply is playing waits for the next silence instead).
func (t *Translator) sessionError(e session.Error) []protocol.ServerEvent {
	id := e.EventID
	switch {
	case id != "" && id == t.startID:
		if t.phase == starting {
			t.phase, t.cfg = notStarted, nil
		}
		id = t.clientStartID
	case strings.HasPrefix(id, internalPrefix+"task"):
		return t.tasks.refused(e)
	case strings.HasPrefix(id, internalPrefix) && e.Code == "conversation_already_has_active_response":
		t.retry(id)
		return nil
	case strings.HasPrefix(id, internalPrefix+"cancel") && e.Code == "response_cancel_not_active":
		return nil // the reply ended by itself first
	case strings.HasPrefix(id, internalPrefix+"commentary"), strings.HasPrefix(id, internalPrefix+"ack"):
		t.out.active, t.out.ours = false, false
		id = ""
	case strings.HasPrefix(id, internalPrefix):
		id = ""
	default:
		t.tasks.outputRefused(id)
	}
	return []protocol.ServerEvent{errorEvent(&protocol.Error{Code: e.Code, Message: e.Message, Param: e.Param, EventID: id}, e.Type)}
}

// ErrorEvent is err in Live's shape (the connection's refusals).
func (t *Translator) ErrorEvent(err *protocol.Error) protocol.ServerEvent {
	return errorEvent(err, "")
}

func errorEvent(err *protocol.Error, typ string) ErrorEvent {
	if typ == "" {
		typ = session.ErrorType(err.Code)
	}
	return ErrorEvent{ClientEventID: err.EventID, Error: ErrorBody{Type: typ, Code: err.Code, Message: err.Message, Param: err.Param, ClientEventID: err.EventID}}
}

// InvalidRequestCode is the error's code when the client's own event provoked it (it spends
// the session's budget of invalid events), else "".
func (e ErrorEvent) InvalidRequestCode() string {
	if e.Error.Type != "invalid_request_error" {
		return ""
	}
	return e.Error.Code
}

// Resumable reports that a Live session ends with its connection: Live has no resume.
func (*Translator) Resumable() bool { return false }

// retry asks again, at the next silence, for the response the translator's command id asked
// for: a reply started in between (the one that is active is not ours).
func (t *Translator) retry(id string) {
	t.out.ours = false
	switch {
	case strings.HasPrefix(id, internalPrefix+"commentary"):
		t.commentary = append([]int{t.asked}, t.commentary...)
	case strings.HasPrefix(id, internalPrefix+"ack"):
		t.deleg.ackDue = true
	}
}

// spaced is text with a leading space when words came before it and it has none: a new
// utterance or reply continues its speaker's one transcript stream.
func spaced(before bool, text string) string {
	if before && text != "" && text[0] != ' ' {
		return " " + text
	}
	return text
}
