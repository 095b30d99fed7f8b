package vllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// vllm-omni's own session keys: what a session.update may carry besides OpenAI's. The
// translator reads them (taking them out of the session object OpenAI's decoder reads),
// honours or refuses each by name, and echoes the ones it took in every session object.
//
//   - ref_audio: a voice sample (a data URL). Echoed; omniserve's voice cannot clone one, so the
//     session keeps its voice (as vllm-omni's chat lane does with a voice it lacks).
//   - overlap_policy: listen_only (omniserve's overlap without turn detection's
//     interrupt_response), or barge_in_on_speech with a turn_detection whose
//     interrupt_response is true; auto is refused.
//   - playback_commit_policy: commit_all_on_done (the history keeps a reply's whole text) or
//     ack_only (the text of the audio the client's acks committed, session.PlaybackAck.AckOnly).
//   - sample_rate_hz, audio.input.sample_rate_hz: the input's rate (16 kHz unless given: the
//     dialect's default, set on the session's first update).
//   - overlap_short_ack_ms, overlap_barge_in_ms, overlap_silence_rms: vllm-omni's overlap
//     thresholds. omniserve's are fixed (overlapThresholds): each is echoed, and a value other
//     than omniserve's is refused by name.
//   - extra_body: minicpmo45_native_duplex and native_duplex (model flags: echoed),
//     force_listen_count 0 (none forced; more is refused), return_stage_metrics false (true is
//     refused: no stage metrics on events), duplex_initial_user_text (refused: send
//     input.text.append).

// defaultInputRate is the dialect's input rate when a session names none.
const defaultInputRate = 16000

// Playback commit policies.
const (
	policyCommitAll = "commit_all_on_done"
	policyAckOnly   = "ack_only"
)

// keys are the vllm-omni session keys in force, as they are echoed.
type keys struct {
	refAudio       any
	overlapPolicy  string
	playbackPolicy string
	extra          map[string]any // the extra_body keys the dialect took
	updated        bool           // a session.update was decoded (the first one sets the input rate)
}

func newKeys() keys {
	return keys{overlapPolicy: "listen_only", playbackPolicy: policyCommitAll, extra: map[string]any{}}
}

// keyError is a refused session key.
func keyError(code, param, eventID, format string, a ...any) *protocol.Error {
	return &protocol.Error{Code: code, Param: "session." + param, EventID: eventID, Message: fmt.Sprintf(format, a...)}
}

// takeKeys reads vllm-omni's keys out of the session object obj (removing them, so that
// OpenAI's decoder reads the rest), into next, a copy of the keys in force. It returns the
// input rate the update names (0: none).
func takeKeys(obj map[string]json.RawMessage, next *keys, eventID string) (int, *protocol.Error) {
	if v, ok := obj["ref_audio"]; ok {
		delete(obj, "ref_audio")
		var s *string
		if json.Unmarshal(v, &s) != nil {
			return 0, keyError("invalid_type", "ref_audio", eventID, "ref_audio must be a string (a data URL of a WAV file) or null")
		}
		next.refAudio = nil
		if s != nil {
			next.refAudio = *s
		}
	}
	if werr := takePolicies(obj, next, eventID); werr != nil {
		return 0, werr
	}
	if werr := takeOverlap(obj, eventID); werr != nil {
		return 0, werr
	}
	rate, werr := takeRate(obj, eventID)
	if werr != nil {
		return 0, werr
	}
	return rate, takeExtra(obj, next, eventID)
}

// takePolicies reads overlap_policy and playback_commit_policy.
func takePolicies(obj map[string]json.RawMessage, next *keys, eventID string) *protocol.Error {
	if v, ok := obj["overlap_policy"]; ok {
		delete(obj, "overlap_policy")
		var p string
		_ = json.Unmarshal(v, &p)
		switch {
		case p == "listen_only" && !interrupts(obj):
		case p == "barge_in_on_speech" && interrupts(obj):
		default:
			return keyError("unsupported_value", "overlap_policy", eventID,
				"overlap_policy %s is not served: omniserve's overlap follows turn_detection (listen_only with turn_detection null or interrupt_response false, barge_in_on_speech with a turn_detection whose interrupt_response is true)", string(v))
		}
		next.overlapPolicy = p
	}
	if v, ok := obj["playback_commit_policy"]; ok {
		delete(obj, "playback_commit_policy")
		var p string
		if json.Unmarshal(v, &p) != nil || (p != policyCommitAll && p != policyAckOnly) {
			return keyError("invalid_value", "playback_commit_policy", eventID, "playback_commit_policy must be %q or %q", policyCommitAll, policyAckOnly)
		}
		next.playbackPolicy = p
	}
	return nil
}

// overlapThresholds are vllm-omni's overlap keys with omniserve's values, the only ones it
// serves, and why each is fixed.
var overlapThresholds = []struct {
	key   string
	value float64
	why   string
}{
	// Its default; omniserve makes no short-acknowledgement decision of its own: a commit
	// during a response is answered after it.
	{"overlap_short_ack_ms", 700, "omniserve does not tell a short acknowledgement apart: a commit during a response is answered after it"},
	// The speech over a response after which the engine yields (session's OverlapBargeInMs).
	{"overlap_barge_in_ms", session.OverlapBargeInMs, fmt.Sprintf("omniserve's engine yields to %d ms of speech over a response", session.OverlapBargeInMs)},
	// Its default; omniserve's overlap is heard by a voice activity detector, not an RMS floor.
	{"overlap_silence_rms", 0.003, "omniserve hears overlapping speech with its voice activity detector, not by RMS"},
}

// takeOverlap reads the overlap thresholds: omniserve's own values are accepted (they are
// what is served), any other is refused naming its key.
func takeOverlap(obj map[string]json.RawMessage, eventID string) *protocol.Error {
	for _, th := range overlapThresholds {
		v, ok := obj[th.key]
		if !ok {
			continue
		}
		delete(obj, th.key)
		var f float64
		if json.Unmarshal(v, &f) != nil {
			return keyError("invalid_type", th.key, eventID, "%s must be a number", th.key)
		}
		if f != th.value {
			return keyError("unsupported_value", th.key, eventID, "%s %s is not served (only %g): %s",
				th.key, strings.TrimSpace(string(v)), th.value, th.why)
		}
	}
	return nil
}

// interrupts reports whether the update's turn_detection barges in on speech.
func interrupts(obj map[string]json.RawMessage) bool {
	var td struct {
		InterruptResponse *bool `json:"interrupt_response"`
	}
	v, ok := obj["turn_detection"]
	if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) || json.Unmarshal(v, &td) != nil {
		return false
	}
	return td.InterruptResponse == nil || *td.InterruptResponse
}

// takeRate reads the input rate: sample_rate_hz, or audio.input.sample_rate_hz.
func takeRate(obj map[string]json.RawMessage, eventID string) (int, *protocol.Error) {
	v, ok := obj["sample_rate_hz"]
	delete(obj, "sample_rate_hz")
	param := "sample_rate_hz"
	if !ok {
		var a struct {
			Input struct {
				Rate json.RawMessage `json:"sample_rate_hz"`
			} `json:"input"`
		}
		if json.Unmarshal(obj["audio"], &a) != nil || a.Input.Rate == nil {
			return 0, nil
		}
		v, param = a.Input.Rate, "audio.input.sample_rate_hz"
	}
	var rate int
	if json.Unmarshal(v, &rate) != nil || rate <= 0 {
		return 0, keyError("invalid_value", param, eventID, "%s must be a positive integer (Hz)", param)
	}
	return rate, nil
}

// takeExtra reads the dialect's extra_body keys, leaving OpenAI's (auto_response, seed...).
func takeExtra(obj map[string]json.RawMessage, next *keys, eventID string) *protocol.Error {
	var extra map[string]json.RawMessage
	if json.Unmarshal(obj["extra_body"], &extra) != nil || extra == nil {
		return nil
	}
	for _, k := range []string{"minicpmo45_native_duplex", "native_duplex"} {
		if v, ok := extra[k]; ok {
			var b bool
			if json.Unmarshal(v, &b) != nil {
				return keyError("invalid_type", "extra_body."+k, eventID, "%s must be a boolean", k)
			}
			next.extra[k] = b
		}
	}
	if v, ok := extra["force_listen_count"]; ok {
		var n int
		if json.Unmarshal(v, &n) != nil || n != 0 {
			return keyError("unsupported_value", "extra_body.force_listen_count", eventID,
				"force_listen_count %s is not served: omniserve's engine decides every unit (only 0, none forced)", strings.TrimSpace(string(v)))
		}
		next.extra["force_listen_count"] = 0
	}
	if v, ok := extra["return_stage_metrics"]; ok {
		var b bool
		if json.Unmarshal(v, &b) != nil || b {
			return keyError("unsupported_value", "extra_body.return_stage_metrics", eventID,
				"return_stage_metrics is not served: omniserve reports stages in its turn statistics and traces (docs/STATS.md)")
		}
		next.extra["return_stage_metrics"] = false
	}
	if _, ok := extra["duplex_initial_user_text"]; ok {
		return keyError("unsupported_value", "extra_body.duplex_initial_user_text", eventID,
			"duplex_initial_user_text is not served: send input.text.append after the session is created")
	}
	return nil
}

// update decodes session.update's session object obj (nested or flat): vllm-omni's keys taken
// and checked first, then OpenAI's decoder on the rest; the session's first update gets the
// dialect's 16 kHz input unless it names a rate.
func (t *Translator) update(obj map[string]json.RawMessage, eventID, typ string) (session.Command, *protocol.Error) {
	t.mu.Lock()
	next := t.keys
	t.mu.Unlock()
	next.extra = make(map[string]any, len(t.keys.extra))
	for k, v := range t.keys.extra {
		next.extra[k] = v
	}
	rate, werr := takeKeys(obj, &next, eventID)
	if werr != nil {
		return nil, werr
	}
	cmd, werr := reDecode(map[string]any{"type": "session.update", "event_id": eventID, "session": obj}, typ)
	if werr != nil {
		return nil, werr
	}
	u, ok := cmd.(*session.UpdateSession)
	if !ok {
		return cmd, nil
	}
	switch {
	case rate != 0:
	case u.Patch.InputFormat != nil && u.Patch.InputFormat.Rate == 0 && pcm(*u.Patch.InputFormat):
		rate = defaultInputRate // a PCM format without a rate: 16 kHz in vllm-omni
	case u.Patch.InputFormat == nil && !next.updated:
		rate = defaultInputRate
	}
	if rate != 0 {
		f := session.AudioFormat{Type: "pcm16", Rate: rate}
		if u.Patch.InputFormat != nil {
			f.Type = u.Patch.InputFormat.Type
		}
		u.Patch.InputFormat = &f
	}
	next.updated = true
	t.mu.Lock()
	t.keys = next
	t.mu.Unlock()
	return u, nil
}

// pcm reports whether f is a PCM format (G.711 is 8 kHz whatever the dialect).
func pcm(f session.AudioFormat) bool {
	n, err := session.NormalizeInputFormat(f)
	return err == nil && !strings.HasPrefix(n.Type, "g711")
}
