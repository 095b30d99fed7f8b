// Package realtime is the WebSocket endpoint /v1/realtime (and the WebRTC calls): it hands the
// client's frames to the dialect's translator (internal/realtime/openai: Decode) and the
// commands it returns to the session, sends refusals as OpenAI-style error events, and runs the
// per-connection reader and writer goroutines and the bounded outbound queue. The session's
// events carry wire-neutral effects; they enter the connection in one place (outbound.go),
// where the translator (openai.Encode) turns each into its server event, on the session's
// goroutine and in its order. The stream writes them with protocol.Encode, in GA or beta
// names and spelling, stamping event_id and server_event_seq when it writes them (stream.go).
package realtime

import (
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/openai"
	"github.com/omniserve/omniserve/internal/session"
)

// WireError is a decoding or validation failure, sent to the client as an error event.
type WireError = protocol.Error

// errorEvent returns the error as a session event.
func errorEvent(e *WireError) session.Event {
	return session.ErrorEvent(session.ErrorType(e.Code), e.Code, e.Message, e.EventID, e.Param)
}

// ResumeSession is session.resume (openai.ResumeSession): the connection handles it.
type ResumeSession = openai.ResumeSession

// DecodeClientEvent parses one client event (a text frame) into a session command, in the
// OpenAI Realtime dialect (openai.Decode).
func DecodeClientEvent(data []byte) (session.Command, *WireError) { return openai.Decode(data) }
