package protocol

// sessionFields are the top-level fields of a session object that decodePatch reads or that
// OpenAI documents (GA and beta spellings, the transcription session's, and the read-only ones
// a client echoes back from session.created): anything else is a client's mistake or padding.
var sessionFields = map[string]bool{
	"type": true, "object": true, "id": true, "model": true, "expires_at": true, "client_secret": true,
	"output_modalities": true, "modalities": true, "instructions": true, "audio": true, "voice": true,
	"input_audio_format": true, "output_audio_format": true, "turn_detection": true,
	"input_audio_transcription": true, "input_audio_noise_reduction": true, "include": true,
	"tools": true, "tool_choice": true, "tracing": true, "idle_timeout_s": true, "extra_body": true,
	"max_response_output_tokens": true, "max_output_tokens": true, "max_tokens": true,
	"temperature": true, "truncation": true, "prompt": true, "speed": true,
}

// KnownSessionField reports whether name is a top-level field of a session object.
func KnownSessionField(name string) bool { return sessionFields[name] }
