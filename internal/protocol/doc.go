// Package protocol is the OpenAI Realtime wire protocol as Go types: one type per client event
// that omniserve accepts and one per server event it sends, each named by its GA event type,
// with the decoders and the encoder of the frames.
//
// Client events. DecodeClientEvent turns one text frame into a ClientEvent, mapping the beta
// spellings onto the GA ones (modalities → output_modalities, input_audio_format →
// audio.input.format, top-level turn_detection, max_response_output_tokens,
// input_audio_transcription, ...) and recording whether a session object was written only in
// beta spelling (SessionUpdate.BetaSpelling), which picks a connection's dialect. Every refusal
// is an *Error carrying the realtime error event's code, message, param and the client's
// event_id.
//
// Server events. A ServerEvent is an event's payload (ResponseOutputAudioDelta,
// ConversationItemAdded, SessionUpdated, ErrorEvent, ...); conversation items, content parts,
// the response, its usage and the session objects are structs of their own (Item, ContentPart,
// Response, Usage, Session, TranscriptionSession). The values are GA-shaped: Encode writes the
// beta spelling of the fields (content parts audio / text, the beta response and session
// objects) for a session that speaks beta, and BetaEventName gives the beta event name. Encode
// splices the envelope the transport stamps at write time (type, event_id, server_event_seq)
// into the payload's JSON. Every payload struct declares its fields in the order of their JSON
// names, so a frame's keys come out sorted, byte for byte as the maps omniserve once built
// encoded (server_test.go checks both). A few values stay open (any, map): a client's tool
// definitions and JSON schemas, its tracing object and response metadata, and items the MCP code
// still builds as maps (Item.Open); their comments say so.
//
// DecodeServerEvent is the client side: it reads a frame of either dialect into the same types
// (talkclient and the bench clients use it), or an OtherEvent for a type this package does not
// have.
//
// A new server event is a struct with its fields in JSON-name order and an EventType method;
// it is registered in server_decode.go's init, and gets a sample in server_test.go's
// serverSamples, whose golden frames `go test ./internal/protocol/ -run Golden -update` writes.
//
// The package is a leaf (layer 0): it imports no other omniserve package, so the session, the
// transports (WebSocket and WebRTC) and the clients (talkclient, the benches) can share it.
package protocol
