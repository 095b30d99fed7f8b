package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// decodeResponseInput reads response.create's input: message items with text content, and
// item_reference entries ({type:"item_reference", id}). Audio content is refused with its
// param: an out-of-band response has no input buffer to transcribe it through.
func decodeResponseInput(v json.RawMessage) ([]InputItem, *Error) {
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return nil, &Error{Code: "invalid_type", Param: "response.input", Message: "'response.input' must be an array of items"}
	}
	out := make([]InputItem, 0, len(items))
	for i, it := range items {
		param := fmt.Sprintf("response.input[%d]", i)
		if it == nil {
			return nil, &Error{Code: "invalid_type", Param: param, Message: "each input entry must be an object"}
		}
		typ, _, _ := str(it, "type")
		switch typ {
		case "item_reference":
			id, ok, _ := str(it, "id")
			if !ok || id == "" {
				return nil, &Error{Code: "missing_required_parameter", Param: param + ".id", Message: "an item_reference needs the 'id' of a conversation item"}
			}
			out = append(out, InputItem{Ref: id})
			continue
		case "", "message":
		default:
			return nil, &Error{Code: "invalid_value", Param: param + ".type", Message: fmt.Sprintf("unsupported input item type %q (message or item_reference)", typ)}
		}
		role, ok, _ := str(it, "role")
		if !ok || role == "" {
			return nil, &Error{Code: "missing_required_parameter", Param: param + ".role", Message: "missing required parameter 'role'"}
		}
		var parts []map[string]json.RawMessage
		if c, ok := it["content"]; !ok || json.Unmarshal(c, &parts) != nil || len(parts) == 0 {
			return nil, &Error{Code: "missing_required_parameter", Param: param + ".content", Message: "'content' must be a non-empty array"}
		}
		var text strings.Builder
		for j, p := range parts {
			pt, _, _ := str(p, "type")
			switch pt {
			case "input_text", "text", "output_text":
				s, _, _ := str(p, "text")
				text.WriteString(s)
			default:
				return nil, &Error{Code: "invalid_value", Param: fmt.Sprintf("%s.content[%d].type", param, j),
					Message: fmt.Sprintf("unsupported content type %q in a response's input (text only; reference an audio item with item_reference)", pt)}
			}
		}
		if strings.TrimSpace(text.String()) == "" {
			return nil, &Error{Code: "missing_required_parameter", Param: param + ".content", Message: "the item has no text"}
		}
		out = append(out, InputItem{Role: role, Text: text.String()})
	}
	return out, nil
}

// gaOnlySessionFields are session fields only the GA dialect of the OpenAI Realtime session
// object has: their presence means GA.
var gaOnlySessionFields = []string{"type", "output_modalities", "audio", "max_output_tokens",
	"tracing", "truncation", "prompt", "include"}

// betaSpelling reports a session object only a beta client writes: no GA-only field, and a
// value only the beta dialect spells so: modalities with both text and audio (GA allows one),
// an audio format as a string ("pcm16", "g711_ulaw", ...; GA uses {type, rate} objects), or
// input_audio_transcription. The other beta-named fields (turn_detection, voice,
// max_response_output_tokens, temperature, modalities with one entry) are not enough: omniserve
// accepts them from GA clients too, and its own clients have always sent them.
func betaSpelling(obj map[string]json.RawMessage) bool {
	for _, k := range gaOnlySessionFields {
		if _, ok := obj[k]; ok {
			return false
		}
	}
	var mods []string
	if v, ok := obj["modalities"]; ok && json.Unmarshal(v, &mods) == nil && len(mods) >= 2 {
		return true
	}
	for _, k := range []string{"input_audio_format", "output_audio_format"} {
		var f string
		if v, ok := obj[k]; ok && json.Unmarshal(v, &f) == nil {
			return true
		}
	}
	if v, ok := obj["input_audio_transcription"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		return true
	}
	return false
}
