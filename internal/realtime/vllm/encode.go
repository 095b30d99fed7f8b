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

// Encode is the server event of effect e: OpenAI's, with vllm-omni's error codes.
func (*Translator) Encode(e session.Effect) (protocol.ServerEvent, bool) {
	if er, ok := e.(session.Error); ok {
		er.Code = Code(er.Code)
		e = er
	}
	return openai.Encode(e)
}
