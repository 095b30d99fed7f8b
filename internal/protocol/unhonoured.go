package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// refuseUnhonoured refuses the GA session fields omniserve cannot honour, with their param,
// instead of ignoring them: a client that asks for them learns at once (docs/REALTIME.md,
// "Session"). The values that change nothing (the defaults the Agents SDK and others send:
// speed 1, prompt null) are accepted. include is honoured (decodeInclude), and truncation
// (decodeTruncation).
func refuseUnhonoured(obj, out map[string]json.RawMessage) *Error {
	isNull := func(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }
	if v, ok := obj["prompt"]; ok && !isNull(v) {
		return &Error{Code: "unsupported_value", Param: "session.prompt", Message: "stored prompts are not supported by omniserve (use instructions)"}
	}
	return refuseSpeed(obj, out)
}

// IncludeLogprobs is the one include value: input transcription logprobs.
const IncludeLogprobs = "item.input_audio_transcription.logprobs"

// decodeInclude reads session.include: nil when absent, else whether it names
// IncludeLogprobs (null and [] turn them off). Any other value is refused with its param.
func decodeInclude(obj map[string]json.RawMessage) (*bool, *Error) {
	v, ok := obj["include"]
	if !ok {
		return nil, nil
	}
	on := false
	if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return &on, nil
	}
	var l []string
	if json.Unmarshal(v, &l) != nil {
		return nil, &Error{Code: "invalid_type", Param: "session.include", Message: "include must be an array of strings"}
	}
	for _, x := range l {
		if x != IncludeLogprobs {
			return nil, &Error{Code: "invalid_value", Param: "session.include",
				Message: fmt.Sprintf(`include %q is not known; the only value is %q`, x, IncludeLogprobs)}
		}
		on = true
	}
	return &on, nil
}

// refuseSpeed refuses a speed other than 1.
func refuseSpeed(obj, out map[string]json.RawMessage) *Error {
	isNull := func(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }
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
