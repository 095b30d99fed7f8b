package realtime

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/session"
)

func TestLifecycleEndsReturnSlot(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{MaxSessions: 4}, HandlerConfig{}, nil)
	startResponse := func(t *testing.T, c *wsClient) {
		c.update(event{"turn_detection": nil, "max_response_output_tokens": 40, "idle_timeout_s": 30})
		c.appendAudio(goForward(t), 200, false)
		c.send(event{"type": "input_audio_buffer.commit", "response_create": true})
		c.until("response.created", 30*time.Second)
	}
	t.Run("session.close", func(t *testing.T) {
		c := dial(t, srv.url, nil)
		startResponse(t, c)
		c.send(event{"type": "session.close"})
		closed, before := c.until("session.closed", 10*time.Second)
		require.Equal(t, "client_close", closed.str("reason"))
		var done bool
		for _, e := range before {
			done = done || (e.str("type") == "response.done" && e.obj("response").str("status") == "cancelled")
		}
		require.True(t, done, "the open response ends before session.closed")
		_, ok := c.next(2 * time.Second)
		require.False(t, ok, "session.closed is the last event")
		require.Equal(t, websocket.StatusNormalClosure, c.closeStatus())
		srv.waitSlots(t, 0)
	})
	t.Run("disconnect", func(t *testing.T) {
		c := dial(t, srv.url, nil)
		startResponse(t, c)
		require.Equal(t, 1, srv.m.Active())
		c.close()
		srv.waitSlots(t, 0)
	})
	t.Run("idle timeout", func(t *testing.T) {
		c := dial(t, srv.url, nil)
		c.update(event{"idle_timeout_s": 0.3})
		closed, _ := c.until("session.closed", 5*time.Second)
		require.Equal(t, "timeout", closed.str("reason"))
		srv.waitSlots(t, 0)
	})
	t.Run("handshake timeout", func(t *testing.T) {
		s2 := newServer(t, session.ManagerConfig{}, HandlerConfig{HandshakeTimeout: 200 * time.Millisecond}, nil)
		c := dial(t, s2.url+"?duplex=1", nil)
		e, _ := c.until("error", 5*time.Second)
		require.Equal(t, "config_timeout", e.obj("error").str("code"))
		require.Equal(t, websocket.StatusPolicyViolation, c.closeStatus())
		s2.waitSlots(t, 0)
	})
}

func TestShutdownClosesSessions(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, HandlerConfig{}, nil)
	c := dial(t, srv.url, nil)
	c.update(event{"turn_detection": nil})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, srv.m.Shutdown(ctx))
	closed, _ := c.until("session.closed", 5*time.Second)
	require.Equal(t, "shutdown", closed.str("reason"))
	require.Equal(t, websocket.StatusGoingAway, c.closeStatus())
	require.Equal(t, 0, srv.m.Active())
	code, body := httpStatus(t, srv.url, nil)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "resource_exhausted", body.obj("error").str("code"))
}

func TestAdmissionAndAuth(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{MaxSessions: 1}, HandlerConfig{APIKey: "sk-test"}, nil)
	code, body := httpStatus(t, srv.url, nil)
	require.Equal(t, http.StatusUnauthorized, code)
	require.Equal(t, "invalid_api_key", body.obj("error").str("code"))

	c := dial(t, srv.url, &websocket.DialOptions{Subprotocols: []string{"realtime", "openai-insecure-api-key.sk-test"}})
	c.update(event{})
	code, body = httpStatus(t, srv.url, http.Header{"Authorization": {"Bearer sk-test"}})
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "resource_exhausted", body.obj("error").str("code"))
	require.Equal(t, "rate_limit_error", body.obj("error").str("type"))
	c.close()
	srv.waitSlots(t, 0)
	c2 := dial(t, srv.url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer sk-test"}}})
	c2.update(event{})
}

type noDuplexBackend struct{ session.Backend }

func (noDuplexBackend) SupportsDuplex() bool { return false }

func TestDuplexUnsupported(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, HandlerConfig{}, noDuplexBackend{getFixture(t).backend})
	c := dial(t, srv.url+"?duplex=1", nil)
	e, _ := c.until("error", 5*time.Second)
	require.Equal(t, "unsupported", e.obj("error").str("code"))
	require.Equal(t, websocket.StatusPolicyViolation, c.closeStatus())
	srv.waitSlots(t, 0)
	// Without duplex=1 the same endpoint serves turn-based realtime.
	c2 := dial(t, srv.url, nil)
	s := c2.update(event{})
	require.Equal(t, false, s.obj("session")["duplex"])
}

func TestBadInputKeepsSession(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, HandlerConfig{MaxEventBytes: 1 << 20}, nil)
	c := dial(t, srv.url+"?duplex=1", nil)
	// Before session.update (duplex=1 without ?model=): refused, the handshake goes on.
	c.send(event{"type": "input_audio_buffer.commit", "event_id": "ev_early"})
	e, _ := c.until("error", 5*time.Second)
	require.Equal(t, "session_not_created", e.obj("error").str("code"))
	require.Equal(t, "ev_early", e.obj("error").str("event_id"))
	c.update(event{"turn_detection": nil})

	big := strings.Repeat("A", 2<<20)
	cases := []struct {
		name  string
		raw   string
		code  string
		param string
	}{
		{"malformed json", `{"type": "session.update",`, "invalid_json", ""},
		{"unknown type", `{"type":"no.such.event","event_id":"e1"}`, "unknown_event", "type"},
		{"missing type", `{"event_id":"e2"}`, "missing_required_parameter", "type"},
		{"missing audio", `{"type":"input_audio_buffer.append"}`, "missing_required_parameter", "audio"},
		{"bad base64", `{"type":"input_audio_buffer.append","audio":"***"}`, "bad_audio", "audio"},
		{"odd pcm length", `{"type":"input_audio_buffer.append","audio":"AAAA"}`, "bad_audio", "audio"},
		{"unsupported format", `{"type":"session.update","session":{"input_audio_format":"mp3"}}`, "unsupported_audio_format", "session.input_audio_format"},
		{"bad turn detection", `{"type":"session.update","session":{"turn_detection":{"type":"semantic_vad"}}}`, "unsupported_turn_detection", "turn_detection"},
		{"missing item id", `{"type":"conversation.item.delete"}`, "missing_item_id", "item_id"},
		{"unknown item", `{"type":"conversation.item.retrieve","item_id":"nope"}`, "item_not_found", "item_id"},
		{"empty commit", `{"type":"input_audio_buffer.commit"}`, "input_audio_buffer_empty", ""},
		{"response without input", `{"type":"response.create"}`, "response_create_without_input", ""},
		{"cancel without response", `{"type":"response.cancel"}`, "response_not_active", ""},
		{"per-response instructions", `{"type":"response.create","response":{"instructions":"x"}}`, "unsupported_native_response_options", "response.instructions"},
		{"oversized event", `{"type":"input_audio_buffer.append","audio":"` + big + `"}`, "event_too_large", ""},
	}
	for _, tc := range cases {
		require.NoError(t, c.ws.Write(c.ctx, websocket.MessageText, []byte(tc.raw)), tc.name)
		e, _ := c.until("error", 10*time.Second)
		require.Equal(t, tc.code, e.obj("error").str("code"), tc.name)
		require.Equal(t, "invalid_request_error", e.obj("error").str("type"), tc.name)
		if tc.param != "" {
			require.Equal(t, tc.param, e.obj("error").str("param"), tc.name)
		}
		c.send(event{"type": "session.heartbeat"})
		c.until("session.heartbeat_ack", 5*time.Second)
	}
	// response.create while one is active.
	c.update2(event{"max_response_output_tokens": 40})
	c.appendAudio(goForward(t), 200, false)
	c.send(event{"type": "response.create"})
	c.until("response.created", 30*time.Second)
	c.send(event{"type": "response.create", "event_id": "dup"})
	e, _ = c.until("error", 10*time.Second)
	require.Equal(t, "response_already_active", e.obj("error").str("code"))
	require.Equal(t, "dup", e.obj("error").str("event_id"))
	require.Contains(t, []string{"completed", "incomplete"}, readResponseAfterCreated(t, c))
}

func (c *wsClient) update2(s event) {
	c.t.Helper()
	c.send(event{"type": "session.update", "session": s})
	c.until("session.updated", 10*time.Second)
}

func readResponseAfterCreated(t *testing.T, c *wsClient) string {
	t.Helper()
	done, _ := c.until("response.done", 60*time.Second)
	return done.obj("response").str("status")
}
