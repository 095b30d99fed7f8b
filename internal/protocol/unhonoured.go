package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// refuseUnhonoured refuses the GA session fields omniserve cannot honour, with their param,
// instead of ignoring them: a client that asks for them learns at once (docs/REALTIME.md,
// "Session"). The values that change nothing (the defaults the Agents SDK and others send:
// speed 1, truncation "auto", prompt null, include []) are accepted.
func refuseUnhonoured(obj, out map[string]json.RawMessage) *Error {
	isNull := func(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }
	if v, ok := obj["truncation"]; ok && !isNull(v) {
		var s string
		if json.Unmarshal(v, &s) != nil || s != "auto" {
			return &Error{Code: "unsupported_value", Param: "session.truncation",
				Message: `only truncation "auto" is supported (the oldest items are dropped past server.session_history_bytes)`}
		}
	}
	if v, ok := obj["prompt"]; ok && !isNull(v) {
		return &Error{Code: "unsupported_value", Param: "session.prompt", Message: "stored prompts are not supported by omniserve (use instructions)"}
	}
	if v, ok := obj["include"]; ok && !isNull(v) {
		var l []string
		if json.Unmarshal(v, &l) != nil {
			return &Error{Code: "invalid_type", Param: "session.include", Message: "include must be an array of strings"}
		}
		for _, x := range l {
			if x != "item.input_audio_transcription.logprobs" {
				return &Error{Code: "invalid_value", Param: "session.include",
					Message: fmt.Sprintf(`include %q is not known; the only value is "item.input_audio_transcription.logprobs"`, x)}
			}
		}
		if len(l) > 0 {
			return &Error{Code: "unsupported_value", Param: "session.include",
				Message: "transcription logprobs are not given in realtime sessions yet (it must be empty); POST /v1/audio/transcriptions gives them with include logprobs"}
		}
	}
	for _, f := range []struct {
		v     json.RawMessage
		param string
	}{{out["speed"], "session.audio.output.speed"}, {obj["speed"], "session.speed"}} {
		if f.v == nil || isNull(f.v) {
			continue
		}
		var x float64
		if json.Unmarshal(f.v, &x) != nil || x != 1 {
			return &Error{Code: "unsupported_value", Param: f.param, Message: "the talker speaks at one speed: speed must be 1"}
		}
	}
	return nil
}
