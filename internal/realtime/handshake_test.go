package realtime_test

import (
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

// A client that connects with autostart=0 (vllm-omni's DuplexClient always does) speaks first:
// nothing comes before its first frame; a session.update opens the session with it
// (session.created, then session.updated showing it); any other first frame opens the default
// session and is then processed; no frame within the handshake timeout is config_timeout.
func TestAutostartZeroWaitsForTheFirstFrame(t *testing.T) {
	t.Parallel()
	const handshake = 1500 * time.Millisecond
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{HandshakeTimeout: handshake}, nil)

	t.Run("session.update opens the session", func(t *testing.T) {
		c := dial(t, srv.url+"?duplex=1&autostart=0", nil)
		_, ok := c.next(300 * time.Millisecond)
		require.False(t, ok, "nothing before the client's first frame")
		c.send(event{"type": "session.update", "session": event{"instructions": "Be brief.", "turn_detection": nil}})
		created, ok := c.next(5 * time.Second)
		require.True(t, ok)
		require.Equal(t, "session.created", created.str("type"))
		updated, ok := c.next(5 * time.Second)
		require.True(t, ok)
		require.Equal(t, "session.updated", updated.str("type"))
		require.Equal(t, "Be brief.", updated.obj("session").str("instructions"))
	})
	t.Run("another first frame opens the default session, then is processed", func(t *testing.T) {
		c := dial(t, srv.url+"?autostart=0", nil)
		c.send(event{"type": "session.heartbeat"})
		created, ok := c.next(5 * time.Second)
		require.True(t, ok)
		require.Equal(t, "session.created", created.str("type"))
		ack, ok := c.next(5 * time.Second)
		require.True(t, ok)
		require.Equal(t, "session.heartbeat_ack", ack.str("type"))
	})
	t.Run("an invalid first frame is answered after session.created", func(t *testing.T) {
		c := dial(t, srv.url+"?duplex=1&resume=1", nil)
		c.send(event{"type": "no.such.event", "event_id": "evt_first"})
		created, ok := c.next(5 * time.Second)
		require.True(t, ok)
		require.Equal(t, "session.created", created.str("type"))
		e, ok := c.next(5 * time.Second)
		require.True(t, ok)
		require.Equal(t, "unknown_event", e.obj("error").str("code"))
		require.Equal(t, "evt_first", e.obj("error").str("event_id"))
	})
	t.Run("nothing in time", func(t *testing.T) {
		c := dial(t, srv.url+"?duplex=1&autostart=0", nil)
		e, ok := <-c.events // unnumbered: no session ran
		require.True(t, ok)
		require.Equal(t, "config_timeout", e.obj("error").str("code"))
		require.Equal(t, websocket.StatusPolicyViolation, c.closeStatus())
		srv.waitSlots(t, 0)
	})
}
