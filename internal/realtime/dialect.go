package realtime

import (
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/openai"
	"github.com/omniserve/omniserve/internal/session"
)

// dialect is one wire protocol's translator (docs/REALTIME.md, "A frame's way in and out"):
// client frames into session commands, the session's effects into server events. It is chosen
// at the upgrade and kept by the session's sink, so a resumed connection speaks it too.
type dialect interface {
	// Name labels the dialect in metrics and logs.
	Name() string
	// Decode turns one client frame into a command, or the error event's error.
	Decode(data []byte) (session.Command, *protocol.Error)
	// Encode is the server event of an effect; ok is false for an effect the dialect does not
	// send.
	Encode(e session.Effect) (ev protocol.ServerEvent, ok bool)
	// Code is the dialect's error code for one of the connection's own refusals (OpenAI's code).
	Code(openAI string) string
}

// companion is a dialect that sends events of its own around the event of some effects
// (vllm-omni's response.speak before a response's first audio, its second spelling of an item
// added). beta: the session speaks the beta dialect.
type companion interface {
	Around(e session.Effect, beta bool) (before, after []protocol.ServerEvent)
}

// openAIDialect is OpenAI Realtime (GA, beta and transcription sessions): plain /v1/realtime,
// the calls and their sidebands.
type openAIDialect struct{}

func (openAIDialect) Name() string { return "openai" }

func (openAIDialect) Decode(data []byte) (session.Command, *protocol.Error) {
	return openai.Decode(data)
}

func (openAIDialect) Encode(e session.Effect) (protocol.ServerEvent, bool) { return openai.Encode(e) }

func (openAIDialect) Code(openAI string) string { return openAI }
