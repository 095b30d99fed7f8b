package vllm

import (
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/openai"
	"github.com/omniserve/omniserve/internal/session"
)

// codes are vllm-omni's names of the errors both dialects have, by OpenAI's (omniserve's) name.
var codes = map[string]string{
	"input_audio_buffer_commit_empty":          "input_audio_buffer_empty",
	"item_retrieve_invalid_item_id":            "item_not_found",
	"item_delete_invalid_item_id":              "item_not_found",
	"item_truncate_invalid_item_id":            "item_not_found",
	"response_cancel_not_active":               "response_not_active",
	"conversation_already_has_active_response": "response_already_active",
	// vllm-omni's one code for a malformed event (the param still names the field).
	"missing_required_parameter": "bad_event",
	// A resume of a session that ended, expired or never was (vllm-omni's clients stop retrying).
	"session_not_found": "session_resume_expired",
}

// Code is vllm-omni's error code for an OpenAI one (the code itself where the two agree or
// vllm-omni has none of its own).
func Code(openAI string) string {
	if c, ok := codes[openAI]; ok {
		return c
	}
	return openAI
}

// Code implements the connection's dialect: Code.
func (*Translator) Code(openAI string) string { return Code(openAI) }

// ChunkPeriodMs is the dialect's model unit: the listen cadence, and capabilities'
// chunk_period_ms (vllm-omni's clients read one listen handle per unit).
const ChunkPeriodMs = 1000

// outState is what the encoder keeps between events: the session's id and epoch (vllm-omni's
// metadata carries them), the audio heard since the last listen was told (Decode adds to it),
// and the active response's audio so far (audio deltas carry it cumulated).
type outState struct {
	sessionID   string
	epoch       int
	heardMs     float64
	respID      string
	respAudioMs float64
	spoke       string // the response response.speak was sent for
	generation  int    // attachment_generation: 1 for the session's first connection, +1 per resume
	active      bool   // a response is on (between response.created and .done)
}

// Encode is the server event of effect e: OpenAI's, with vllm-omni's error codes, fields and
// nesting (extend), or nothing for an engine listen within the same unit of audio.
func (t *Translator) Encode(e session.Effect) (protocol.ServerEvent, bool) {
	if er, ok := e.(session.Error); ok {
		er.Code = Code(er.Code)
		e = er
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if d, ok := e.(session.TurnDecision); ok && !t.out.tells(d) {
		return nil, false
	}
	if s, ok := e.(session.TurnSignaled); ok {
		return turnEvent{Epoch: s.Epoch, Event: s.Event, SessionID: s.SessionID, TurnState: s.TurnState}, true
	}
	if c, ok := e.(session.SessionClosed); ok && c.Reason == session.ReasonTimeout {
		// The idle timeout (idle_timeout_s) ends the session as vllm-omni's lease ends an idle
		// one: session.expired, the session's last event (its clients then stop, not resume).
		return sessionExpired{Reason: idleExpired, SessionID: c.SessionID}, true
	}
	ev, ok := openai.Encode(e)
	if !ok {
		return nil, false
	}
	return t.extend(e, ev), true
}

// tells reports whether listen decision d goes out: a speak, a listen with a reason or a
// response, or the engine's listen once a unit of audio came since the last one told.
func (o *outState) tells(d session.TurnDecision) bool {
	o.epoch = d.Epoch
	if d.Speak {
		told := d.ResponseID != o.spoke // once per response: Around may have sent it already
		o.spoke = d.ResponseID
		return told
	}
	if d.Reason != "" || d.ResponseID != "" {
		return true
	}
	if o.heardMs < ChunkPeriodMs {
		return false
	}
	// The engine decides on each append after the appends were read: a unit's worth of
	// decisions is one listen.
	o.heardMs -= ChunkPeriodMs
	return true
}

// extend is ev, OpenAI's event for e, in vllm-omni's shape.
func (t *Translator) extend(e session.Effect, ev protocol.ServerEvent) protocol.ServerEvent {
	o := &t.out
	switch e := e.(type) {
	case session.SessionCreated:
		o.sessionID, o.generation = e.View.ID, 1
		return protocol.Extended{Event: ev, Patch: t.keys.patchSession, Set: o.attachment()}
	case session.SessionUpdated:
		return protocol.Extended{Event: ev, Patch: t.keys.patchSession}
	case session.SessionResumed:
		o.sessionID = e.SessionID
		o.generation++
		return protocol.Extended{Event: ev, Patch: t.keys.patchSession, Set: o.attachment()}
	case session.TurnDecision:
		if !e.Speak {
			return o.listen(ev, e)
		}
	case session.InputCommitted:
		return o.committed(ev, e)
	case session.PlaybackAcknowledged:
		return o.acknowledged(ev, e)
	case session.OutputDelta:
		if e.Kind == session.PartAudio {
			return o.audioDelta(ev, e)
		}
	case session.ResponseStarted:
		o.respID, o.respAudioMs, o.active = e.Response.ID, 0, true
		return protocol.Extended{Event: ev, Patch: completedStatus}
	case session.ResponseDone:
		o.active = false
		return protocol.Extended{Event: ev, Patch: completedStatus}
	}
	return ev
}

// Around is what the dialect sends around the event of effect e: response.speak before a
// response's first audio when the engine's speak decision has not told it (a response the
// commit or response.create started), and an item's conversation.item.added again as
// conversation.item.created (vllm-omni sends both spellings; a beta session's added is already
// spelled created).
func (t *Translator) Around(e session.Effect, beta bool) (before, after []protocol.ServerEvent) {
	switch e := e.(type) {
	case session.OutputDelta:
		if e.Kind != session.PartAudio {
			return nil, nil
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		o := &t.out
		if e.ResponseID == o.spoke {
			return nil, nil
		}
		o.spoke = e.ResponseID
		return []protocol.ServerEvent{protocol.ResponseSpeak{ResponseID: e.ResponseID, ItemID: e.ItemID,
			Metadata: protocol.SpeakMetadata{SessionID: o.sessionID, Epoch: o.epoch, ModelSpeak: true}}}, nil
	case session.ConversationItem:
		if beta || e.Phase != session.PhaseAdded {
			return nil, nil
		}
		if ev, ok := openai.Encode(e); ok {
			return nil, []protocol.ServerEvent{protocol.Extended{Event: ev, Type: "conversation.item.created"}}
		}
	}
	return nil, nil
}

// attachment is what session.created and .resumed say of the connection: its
// attachment_generation, and incarnation 0 (omniserve's sessions live in one process; the fork's
// clients echo it on resume, and 0 or absent is accepted).
func (o *outState) attachment() map[string]any {
	return map[string]any{"attachment_generation": o.generation, "incarnation": 0}
}
