package realtime

import (
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/link"
	"github.com/omniserve/omniserve/internal/realtime/openai"
	"github.com/omniserve/omniserve/internal/session"
)

// WireError is a decoding or validation failure, sent to the client as an error event.
type WireError = protocol.Error

// errorEvent returns the error as the core's outbound event.
func errorEvent(e *WireError) link.Event {
	return link.Event{Type: "error", Payload: protocol.NewErrorEvent(session.ErrorType(e.Code), e.Code, e.Message, e.EventID, e.Param)}
}

// ResumeSession is session.resume (openai.ResumeSession): the connection handles it.
type ResumeSession = openai.ResumeSession

// EventAck is session.event_ack (openai.EventAck): the connection consumes it.
type EventAck = openai.EventAck

// DecodeClientEvent parses one client event (a text frame) into a session command, in the
// OpenAI Realtime dialect (openai.Decode).
func DecodeClientEvent(data []byte) (session.Command, *WireError) { return openai.Decode(data) }
