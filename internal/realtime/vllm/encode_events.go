package vllm

import (
	"math"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// vllm-omni's shapes of the events it spells differently from OpenAI (docs/REALTIME.md,
// "vllm-omni duplex dialect"): each keeps OpenAI's fields and adds vllm-omni's.

// listen is response.listen with vllm-omni's fields: the reason in the response's metadata,
// and the response it ends, if any.
func (o *outState) listen(ev protocol.ServerEvent, d session.TurnDecision) protocol.ServerEvent {
	reason := d.Reason
	if reason == "" {
		reason = "model_listen"
	}
	resp := map[string]any{"object": "realtime.response", "status": "listening",
		"metadata": map[string]any{"type": "response.listen", "session_id": d.SessionID, "epoch": d.Epoch,
			"reason": reason, "model_listen": d.Reason == ""}}
	set := map[string]any{"response": resp}
	if d.ResponseID != "" {
		resp["id"] = d.ResponseID
		set["response_id"] = d.ResponseID
	}
	return protocol.Extended{Event: ev, Set: set}
}

// committed is input_audio_buffer.committed with vllm-omni's event object.
func (o *outState) committed(ev protocol.ServerEvent, c session.InputCommitted) protocol.ServerEvent {
	inner := map[string]any{"type": "input.committed", "session_id": o.sessionID, "epoch": o.epoch,
		"realtime_item_id": c.ItemID}
	if c.Empty {
		inner["empty"] = true
	}
	if c.NoResponse {
		inner["no_response"] = true
	}
	if c.OverlapAck { // a short remark over the response: no answer of its own, the response goes on
		inner["overlap_ack"], inner["is_speech"] = true, false
	}
	if o.active && !c.Empty {
		// Its answer comes after the response that runs (vllm-omni marks the overlap too).
		inner["response_create_deferred"], inner["overlap_deferred"] = true, true
	}
	return protocol.Extended{Event: ev, Set: map[string]any{"event": inner}}
}

// acknowledged is playback.acknowledged with vllm-omni's event object (OpenAI's flat fields
// kept).
func (o *outState) acknowledged(ev protocol.ServerEvent, a session.PlaybackAcknowledged) protocol.ServerEvent {
	inner := map[string]any{"type": "playback.acknowledged", "session_id": o.sessionID, "epoch": o.epoch,
		"item_id": a.ItemID, "response_id": a.ResponseID, "played_ms": a.PlayedMs, "committed_ms": a.CommittedMs,
		"truncate": a.Truncated, "history_committed": !a.Truncated,
		"playback": map[string]any{"sent_ms": a.SentMs, "played_ms": a.PlayedMs, "committed_ms": a.CommittedMs}}
	return protocol.Extended{Event: ev, Set: map[string]any{"event": inner, "committed_ms": a.CommittedMs}}
}

// audioDelta is an audio delta with vllm-omni's metadata: the response's audio so far
// (audio_duration_ms, cumulated; the top-level field stays the chunk's).
func (o *outState) audioDelta(ev protocol.ServerEvent, d session.OutputDelta) protocol.ServerEvent {
	if d.ResponseID != o.respID {
		o.respID, o.respAudioMs = d.ResponseID, 0
	}
	o.respAudioMs += d.DurationMs
	return protocol.Extended{Event: ev, Set: map[string]any{"metadata": map[string]any{
		"session_id": o.sessionID, "epoch": o.epoch, "model_speak": true, "end_of_turn": false,
		"audio_duration_ms": int(math.Round(o.respAudioMs))}}}
}

// completedStatus is a response whose status OpenAI calls incomplete (it hit
// max_output_tokens): completed in vllm-omni, its status_details still saying why. (vllm-omni's
// response.metadata.duplex_event is not added: metadata is OpenAI's string map, which typed
// clients, omniserve's talk among them, read as such.)
func completedStatus(m map[string]any) {
	if r, ok := m["response"].(map[string]any); ok && r["status"] == "incomplete" {
		r["status"] = "completed"
	}
}

// capabilities are what omniserve serves in this dialect, in vllm-omni's terms (set over the
// session's own capabilities, whose other keys stay).
var capabilities = map[string]any{
	"implementation_level": "model_native_duplex", "supports_input_append": true,
	"supports_session_lease": true, "supports_multi_session": true, "chunk_period_ms": ChunkPeriodMs,
	"input_modes": []string{"append_audio_chunk"}, "signal_sources": []string{"server_policy", "client_event"},
}

// patchSession puts the dialect's keys into the session object of a session event: the
// capabilities, and the vllm-omni keys in force (session_keys.go).
func (k keys) patchSession(m map[string]any) {
	s, ok := m["session"].(map[string]any)
	if !ok {
		return
	}
	c, _ := s["capabilities"].(map[string]any)
	if c == nil {
		c = map[string]any{}
	}
	for name, v := range capabilities {
		c[name] = v
	}
	s["capabilities"] = c
	s["ref_audio"] = k.refAudio
	s["overlap_policy"] = k.overlapPolicy
	s["playback_commit_policy"] = k.playbackPolicy
	for _, th := range overlapThresholds {
		s[th.key] = th.value
	}
	if len(k.extra) > 0 {
		x, _ := s["extra_body"].(map[string]any)
		if x == nil {
			x = map[string]any{}
		}
		for name, v := range k.extra {
			x[name] = v
		}
		s["extra_body"] = x
	}
}

// turnEvent is vllm-omni's turn.event, the answer to a turn.signal that asks for no action.
// (Its fields are in sorted order: the envelope's splice needs sorted keys.)
type turnEvent struct {
	Epoch     int    `json:"epoch"`
	Event     string `json:"event"`
	SessionID string `json:"session_id"`
	TurnState string `json:"turn_state"`
}

// EventType implements protocol.ServerEvent.
func (turnEvent) EventType() string { return "turn.event" }

// idleExpired is session.expired's reason for a session its idle timeout ended (vllm-omni's
// lease reason).
const idleExpired = "idle_ttl_expired"

// sessionExpired is vllm-omni's session.expired: the session ended because it was idle for its
// idle_timeout_s. (Its fields are in sorted order: the envelope's splice needs sorted keys.)
type sessionExpired struct {
	Reason    string `json:"reason"`
	SessionID string `json:"session_id"`
}

// EventType implements protocol.ServerEvent.
func (sessionExpired) EventType() string { return "session.expired" }
