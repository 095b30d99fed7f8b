// Package protocol is the OpenAI Realtime wire protocol as Go types: one type per client event
// that omniserve accepts, named by its GA event type, and the decoder that turns one text frame
// into one of them.
//
// Decoding maps the beta spellings onto the GA ones (modalities → output_modalities,
// input_audio_format → audio.input.format, top-level turn_detection, max_response_output_tokens,
// input_audio_transcription, ...) and records whether a session object was written only in beta
// spelling (SessionUpdate.BetaSpelling), which picks a connection's dialect. Every refusal is an
// *Error carrying the realtime error event's code, message, param and the client's event_id.
//
// The package is a leaf (layer 0): it imports no other omniserve package, so the session, the
// transports (WebSocket today) and the clients (talkclient, the benches) can share it.
package protocol
