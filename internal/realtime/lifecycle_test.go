package realtime_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

func TestLifecycleEndsReturnSlot(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{MaxSessions: 4}, realtime.HandlerConfig{}, nil)
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
	t.Run("session.created at once", func(t *testing.T) {
		// A client that waits for session.created before sending anything (the SDK's pattern).
		c := dial(t, srv.url+"?duplex=1", nil)
		e, ok := c.next(5 * time.Second)
		require.True(t, ok)
		require.Equal(t, "session.created", e.str("type"))
		sess := e.obj("session")
		require.Equal(t, "realtime", sess.str("type"))
		require.Equal(t, []any{"audio"}, sess["output_modalities"])
		require.Equal(t, event{"type": "audio/pcm", "rate": 24000.0}, sess.obj("audio").obj("input").obj("format"))
		require.Equal(t, event{"type": "audio/pcm", "rate": 24000.0}, sess.obj("audio").obj("output").obj("format"))
		require.Equal(t, "inf", sess["max_output_tokens"])
		require.Equal(t, "auto", sess["tool_choice"])
		require.Positive(t, sess["expires_at"])
		c.send(event{"type": "session.update", "session": event{"type": "realtime", "instructions": "be brief"}})
		u, _ := c.until("session.updated", 5*time.Second)
		require.Equal(t, "be brief", u.obj("session").str("instructions"))
		c.send(event{"type": "session.close"})
		c.until("session.closed", 5*time.Second)
	})
}

func TestShutdownClosesSessions(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{}, nil)
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
	srv := newServer(t, session.ManagerConfig{MaxSessions: 1}, realtime.HandlerConfig{APIKey: "sk-test"}, nil)
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
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{}, noDuplexBackend{getFixture(t).backend})
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

// vllmCodes are vllm-omni's names of the errors both dialects have, as its spec lists them
// (?duplex=1 speaks vllm-omni's dialect; plain /v1/realtime keeps OpenAI's codes).
var vllmCodes = map[string]string{
	"input_audio_buffer_commit_empty":          "input_audio_buffer_empty",
	"item_retrieve_invalid_item_id":            "item_not_found",
	"item_delete_invalid_item_id":              "item_not_found",
	"item_truncate_invalid_item_id":            "item_not_found",
	"response_cancel_not_active":               "response_not_active",
	"conversation_already_has_active_response": "response_already_active",
	"missing_required_parameter":               "bad_event",
}

func TestBadInputKeepsSession(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{MaxEventBytes: 1 << 20}, nil)
	t.Run("openai", func(t *testing.T) { badInputKeepsSession(t, srv.url, func(c string) string { return c }) })
	t.Run("vllm duplex", func(t *testing.T) {
		badInputKeepsSession(t, srv.url+"?duplex=1", func(c string) string {
			if v, ok := vllmCodes[c]; ok {
				return v
			}
			return c
		})
	})
}

// badInputKeepsSession sends every kind of bad input on one connection to url: each is answered
// with its error (code maps OpenAI's code to the dialect's), and the session goes on.
func badInputKeepsSession(t *testing.T, url string, code func(string) string) {
	c := dial(t, url, nil)
	// Before any session.update: the session exists (session.created came at once).
	c.send(event{"type": "input_audio_buffer.commit", "event_id": "ev_early"})
	e, _ := c.until("error", 5*time.Second)
	require.Equal(t, code("input_audio_buffer_commit_empty"), e.obj("error").str("code"))
	require.Equal(t, "ev_early", e.obj("error").str("event_id"))
	c.update2(event{"turn_detection": nil})

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
		{"bad turn detection", `{"type":"session.update","session":{"turn_detection":{"type":"magic_vad"}}}`, "invalid_value", "session.audio.input.turn_detection.type"},
		{"negative silence", `{"type":"session.update","session":{"audio":{"input":{"turn_detection":{"type":"server_vad","silence_duration_ms":-1}}}}}`, "integer_below_min_value", "session.audio.input.turn_detection.silence_duration_ms"},
		{"negative padding", `{"type":"session.update","session":{"audio":{"input":{"turn_detection":{"type":"server_vad","prefix_padding_ms":-1}}}}}`, "integer_below_min_value", "session.audio.input.turn_detection.prefix_padding_ms"},
		{"idle timeout overflow", `{"type":"session.update","session":{"audio":{"input":{"turn_detection":{"type":"server_vad","idle_timeout_ms":1e300}}}}}`, "invalid_type", "session.audio.input.turn_detection.idle_timeout_ms"},
		{"idle timeout below 5000", `{"type":"session.update","session":{"audio":{"input":{"turn_detection":{"type":"server_vad","idle_timeout_ms":4999}}}}}`, "invalid_value", "session.audio.input.turn_detection.idle_timeout_ms"},
		{"idle timeout above 30000", `{"type":"session.update","session":{"audio":{"input":{"turn_detection":{"type":"server_vad","idle_timeout_ms":30001}}}}}`, "invalid_value", "session.audio.input.turn_detection.idle_timeout_ms"},
		{"max tokens range", `{"type":"session.update","session":{"max_output_tokens":4097}}`, "invalid_value", "session.max_output_tokens"},
		{"max tokens word", `{"type":"session.update","session":{"max_output_tokens":"lots"}}`, "invalid_value", "session.max_output_tokens"},
		{"empty voice", `{"type":"session.update","session":{"audio":{"output":{"voice":""}}}}`, "invalid_value", "session.audio.output.voice"},
		{"mcp tools", `{"type":"session.update","session":{"tools":[{"type":"mcp","server_label":"s","server_url":"http://127.0.0.1:1"}]}}`, "mcp_server_not_allowed", "session.tools[0].server_url"}, // no realtime.mcp_allowed_urls
		{"mcp tool per response", `{"type":"response.create","response":{"tools":[{"type":"mcp","server_label":"s","server_url":"http://127.0.0.1:1"}]}}`, "unsupported_tools", "response.tools[0].type"},
		{"too many mcp tools", `{"type":"session.update","session":{"tools":[{"type":"mcp","server_label":"s0","server_url":"http://127.0.0.1:1"},{"type":"mcp","server_label":"s1","server_url":"http://127.0.0.1:1"},{"type":"mcp","server_label":"s2","server_url":"http://127.0.0.1:1"},{"type":"mcp","server_label":"s3","server_url":"http://127.0.0.1:1"},{"type":"mcp","server_label":"s4","server_url":"http://127.0.0.1:1"},{"type":"mcp","server_label":"s5","server_url":"http://127.0.0.1:1"},{"type":"mcp","server_label":"s6","server_url":"http://127.0.0.1:1"},{"type":"mcp","server_label":"s7","server_url":"http://127.0.0.1:1"},{"type":"mcp","server_label":"s8","server_url":"http://127.0.0.1:1"}]}}`, "invalid_value", "session.tools[8]"},
		{"mcp tool without url", `{"type":"session.update","session":{"tools":[{"type":"mcp","server_label":"s"}]}}`, "missing_required_parameter", "session.tools[0].server_url"},
		{"tool_choice naming no tool", `{"type":"session.update","session":{"tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}}`, "invalid_value", "session.tool_choice"},
		{"missing item id", `{"type":"conversation.item.delete"}`, "missing_item_id", "item_id"},
		{"unknown item", `{"type":"conversation.item.retrieve","item_id":"nope"}`, "item_retrieve_invalid_item_id", "item_id"},
		{"unknown item delete", `{"type":"conversation.item.delete","item_id":"nope"}`, "item_delete_invalid_item_id", "item_id"},
		{"truncate unknown item", `{"type":"conversation.item.truncate","item_id":"nope","content_index":0,"audio_end_ms":10}`, "item_truncate_invalid_item_id", "item_id"},
		{"truncate negative", `{"type":"conversation.item.truncate","item_id":"nope","content_index":0,"audio_end_ms":-1}`, "integer_below_min_value", "audio_end_ms"},
		{"unknown previous item", `{"type":"conversation.item.create","previous_item_id":"nope","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}}`, "invalid_value", "previous_item_id"},
		{"empty commit", `{"type":"input_audio_buffer.commit"}`, "input_audio_buffer_commit_empty", ""},
		{"cancel without response", `{"type":"response.cancel"}`, "response_cancel_not_active", ""},
		{"unknown conversation", `{"type":"response.create","response":{"conversation":"other"}}`, "invalid_value", "response.conversation"},
		{"input not an array", `{"type":"response.create","response":{"conversation":"none","input":"hi"}}`, "invalid_type", "response.input"},
		{"input unknown reference", `{"type":"response.create","response":{"conversation":"none","input":[{"type":"item_reference","id":"nope"}]}}`, "invalid_value", "response.input[0].id"},
		{"input audio", `{"type":"response.create","response":{"conversation":"none","input":[{"type":"message","role":"user","content":[{"type":"input_audio","audio":"AAAA"}]}]}}`, "invalid_value", "response.input[0].content[0].type"},
		{"input role", `{"type":"response.create","response":{"conversation":"none","input":[{"type":"message","role":"robot","content":[{"type":"input_text","text":"hi"}]}]}}`, "invalid_value", "response.input[0].role"},
		{"input prompt", `{"type":"response.create","response":{"prompt":{"id":"p"}}}`, "unsupported_response_option", "response.prompt"},
		{"response max tokens", `{"type":"response.create","response":{"max_output_tokens":0}}`, "invalid_value", "response.max_output_tokens"},
		{"response modality", `{"type":"response.create","response":{"output_modalities":["video"]}}`, "invalid_value", "response.output_modalities"},
		{"oversized event", `{"type":"input_audio_buffer.append","audio":"` + big + `"}`, "event_too_large", ""},
	}
	for _, tc := range cases {
		require.NoError(t, c.ws.Write(c.ctx, websocket.MessageText, []byte(tc.raw)), tc.name)
		e, _ := c.until("error", 10*time.Second)
		require.Equal(t, code(tc.code), e.obj("error").str("code"), tc.name)
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
	require.Equal(t, code("conversation_already_has_active_response"), e.obj("error").str("code"))
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
