package session_test

import (
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/openai"
	"github.com/omniserve/omniserve/internal/session"
)

// The session's tests read its effects as the OpenAI dialect writes them (session_test.go
// wireOf): through the real translator, which this external test package may import.
func init() {
	session.SetWireForTests(func(ev session.Event) (string, any, []byte) {
		p, ok := openai.Encode(ev.Effect)
		if !ok {
			return "", nil, nil
		}
		data, err := protocol.Encode(p, protocol.Envelope{Type: p.EventType()}, ev.Beta)
		if err != nil {
			panic(err)
		}
		return p.EventType(), p, data
	})
}
