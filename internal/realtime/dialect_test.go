package realtime_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

// typesUntilDone reads events up to response.done and returns their types.
func typesUntilDone(t *testing.T, c *wsClient) []string {
	t.Helper()
	_, seen := c.until("response.done", 2*time.Minute)
	types := make([]string, 0, len(seen))
	for _, e := range seen {
		types = append(types, e.str("type"))
	}
	return types
}

// TestBetaDetectedFromFields: without the OpenAI-Beta header, a first session.update with a
// beta-only value (here a string audio format) marks a beta client: session.updated in the beta
// shape, beta event names after it. A GA-spelled first update, or omniserve's long-accepted mix
// (beta field names with values GA also has), keeps GA for good.
func TestBetaDetectedFromFields(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{}, nil)

	t.Run("beta fields", func(t *testing.T) {
		c := dial(t, srv.url, nil)
		created, _ := c.until("session.created", 10*time.Second)
		require.Equal(t, "realtime", created.obj("session").str("type"), "session.created precedes the client's first event: GA")
		c.send(event{"type": "session.update", "session": event{"modalities": []string{"text"},
			"input_audio_format": "pcm16", "turn_detection": nil, "max_response_output_tokens": 8}})
		upd, _ := c.until("session.updated", 10*time.Second)
		s := upd.obj("session")
		require.Nil(t, s["type"], "beta session shape: no type")
		require.Equal(t, []any{"text"}, s["modalities"])
		require.Equal(t, "pcm16", s.str("input_audio_format"))
		c.send(userText("hello"))
		c.until("conversation.item.created", 10*time.Second)
		c.send(event{"type": "response.create"})
		types := typesUntilDone(t, c)
		require.Contains(t, types, "response.text.delta")
		require.Contains(t, types, "response.text.done")
		require.NotContains(t, types, "response.output_text.delta")
		require.NotContains(t, types, "conversation.item.done")
		c.close()
	})

	t.Run("GA fields", func(t *testing.T) {
		c := dial(t, srv.url, nil)
		c.send(event{"type": "session.update", "session": event{"type": "realtime", "output_modalities": []string{"text"},
			"turn_detection": nil, "max_output_tokens": 8}})
		upd, _ := c.until("session.updated", 10*time.Second)
		require.Equal(t, "realtime", upd.obj("session").str("type"))
		// A later beta-spelled update is accepted but changes no dialect.
		c.send(event{"type": "session.update", "session": event{"input_audio_format": "pcm16"}})
		upd, _ = c.until("session.updated", 10*time.Second)
		require.Equal(t, "realtime", upd.obj("session").str("type"))
		c.send(userText("hello"))
		c.until("conversation.item.added", 10*time.Second)
		c.send(event{"type": "response.create"})
		types := typesUntilDone(t, c)
		require.Contains(t, types, "response.output_text.delta")
		require.NotContains(t, types, "response.text.delta")
		c.close()
	})

	t.Run("omniserve's mixed spelling stays GA", func(t *testing.T) {
		c := dial(t, srv.url, nil)
		c.send(event{"type": "session.update", "session": event{"modalities": []string{"text"}, "turn_detection": nil,
			"max_response_output_tokens": 8, "voice": "alloy"}})
		upd, _ := c.until("session.updated", 10*time.Second)
		require.Equal(t, "realtime", upd.obj("session").str("type"), "beta-named fields without a beta-only value: GA")
		c.close()
	})

	t.Run("first event not an update", func(t *testing.T) {
		c := dial(t, srv.url, nil)
		c.send(event{"type": "session.heartbeat"})
		c.until("session.heartbeat_ack", 10*time.Second)
		c.send(event{"type": "session.update", "session": event{"modalities": []string{"text", "audio"}, "input_audio_format": "pcm16"}})
		upd, _ := c.until("session.updated", 10*time.Second)
		require.Equal(t, "realtime", upd.obj("session").str("type"), "the first event decides: GA")
		c.close()
	})
}
