package realtime

import (
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/openai"
	"github.com/omniserve/omniserve/internal/session"
)

// outEvent is one server event on its way to the client: the dialect's event for one of the
// session's effects, with what the epoch fence needs.
type outEvent struct {
	// Type is the GA event type (Payload's).
	Type    string
	Payload protocol.ServerEvent
	// Epoch and Model are the session event's (the stale-epoch filter).
	Epoch int
	Model bool
	// Beta: the client speaks the beta dialect; the stream writes the beta name and spelling.
	Beta bool
}

// outbound is where the session's events enter the connection: the OpenAI Realtime translator
// (internal/realtime/openai) turns ev's effect into its server event. ok is false for an effect
// the dialect does not send.
func outbound(ev session.Event) (outEvent, bool) {
	p, ok := openai.Encode(ev.Effect)
	if !ok {
		return outEvent{}, false
	}
	return outEvent{Type: p.EventType(), Payload: p, Epoch: ev.Epoch, Model: ev.Model, Beta: ev.Beta}, true
}
