package test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/rtcclient"
)

// TestWebRTCSideband drives OpenAI's server-side tools pattern against bin/omniserve: a "browser"
// (a pion peer with an ek_ key) makes a call, and the app's backend joins it with a WebSocket
// on /v1/realtime?call_id=rtc_… and the API key. The backend's session.update (with a tool)
// shows as session.updated on the browser's data channel, its response.create plays as RTP on
// the call while the sideband gets the response's events without audio deltas, and the hangup
// closes the sideband with a close frame.
func TestWebRTCSideband(t *testing.T) {
	srv := startBinary(t, "--api-key", "sk")
	base := "http://" + srv.addr
	wsBase := "ws://" + srv.addr + "/v1/realtime"

	resp, body := postWith(t, base+"/v1/realtime/client_secrets", "sk", "application/json",
		`{"session":{"type":"realtime","audio":{"input":{"turn_detection":null}}}}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var secret struct{ Value string }
	require.NoError(t, json.Unmarshal(body, &secret))

	ctx := context.Background()
	c, err := rtcclient.Dial(ctx, rtcclient.Config{BaseURL: base, Key: secret.Value})
	require.NoError(t, err)
	defer c.Close()
	loc, callID := c.Location(), c.CallID()
	until := func(typ string, d time.Duration) rtcclient.Event {
		t.Helper()
		ev, err := c.WaitFor(ctx, typ, d)
		require.NoError(t, err, "on the data channel\n%s", srv.logs.String())
		return ev
	}
	until("session.created", 30*time.Second)

	// Refusals before any upgrade: the browser's ek_ key, an unknown call.
	for _, bad := range []struct {
		name, query, key string
		want             int
	}{
		{"client secret", "?call_id=" + callID, secret.Value, http.StatusUnauthorized},
		{"unknown call", "?call_id=rtc_nope", "sk", http.StatusNotFound},
	} {
		code, e := dialRefused(t, wsBase+bad.query, bad.key)
		require.Equal(t, bad.want, code, bad.name)
		require.NotEmpty(t, e, bad.name)
	}

	sb := dialSideband(t, wsBase+"?call_id="+callID, "sk")
	tool := map[string]any{"type": "function", "name": "lookup_order", "description": "Look up an order",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"order_id": map[string]any{"type": "string"}}}}
	sb.send(t, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime",
		"instructions": "Answer in one word.", "max_output_tokens": 8, "tools": []any{tool}}})
	upd := until("session.updated", 10*time.Second)
	sess := upd.M["session"].(map[string]any)
	require.Equal(t, "Answer in one word.", sess["instructions"], "the sideband's update acts on the call's session")
	require.Equal(t, "lookup_order", sess["tools"].([]any)[0].(map[string]any)["name"])

	sb.send(t, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": "Say hello."}}}})
	sb.send(t, map[string]any{"type": "response.create"})
	sbSeen := map[string]int{}
	for {
		ev := sb.next(t, 90*time.Second)
		sbSeen[ev["type"].(string)]++
		if ev["type"] == "response.done" {
			break
		}
	}
	until("response.done", 30*time.Second)
	until("output_audio_buffer.stopped", 30*time.Second)
	require.Zero(t, sbSeen["response.output_audio.delta"], "no audio deltas on a call's sideband")
	require.Positive(t, sbSeen["response.output_audio.done"])
	require.Positive(t, sbSeen["output_audio_buffer.started"])
	require.NotContains(t, c.Seen(), "response.output_audio.delta")
	packets := c.Stats().Packets
	require.Greater(t, packets, int64(5), "the sideband's response plays as RTP on the call")
	t.Logf("sideband response: %d RTP packets on the call; sideband events %v", packets, sbSeen)

	resp, body = postWith(t, base+loc+"/hangup", "sk", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, websocket.StatusNormalClosure, sb.closeStatus(t, 15*time.Second), "the hangup closes the sideband with a close frame")
	require.NoError(t, c.Close())
}

// sidebandConn is a WebSocket client that keeps its close status.
type sidebandConn struct {
	ws       *websocket.Conn
	events   chan map[string]any
	done     chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc
	closeErr error
}

func dialSideband(t *testing.T, url, key string) *sidebandConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}}) //nolint:bodyclose // coder/websocket closes it
	require.NoError(t, err)
	c := &sidebandConn{ws: ws, events: make(chan map[string]any, 8192), done: make(chan struct{}), ctx: ctx, cancel: cancel}
	go func() {
		defer close(c.done)
		defer close(c.events)
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				c.closeErr = err
				return
			}
			var m map[string]any
			if json.Unmarshal(b, &m) == nil {
				c.events <- m
			}
		}
	}()
	t.Cleanup(func() { _ = ws.CloseNow(); <-c.done; cancel() })
	return c
}

func (c *sidebandConn) send(t *testing.T, ev map[string]any) {
	t.Helper()
	b, err := json.Marshal(ev)
	require.NoError(t, err)
	require.NoError(t, c.ws.Write(c.ctx, websocket.MessageText, b))
}

func (c *sidebandConn) next(t *testing.T, timeout time.Duration) map[string]any {
	t.Helper()
	select {
	case ev, ok := <-c.events:
		require.True(t, ok, "the sideband ended")
		require.NotEqual(t, "error", ev["type"], "%v", ev["error"])
		return ev
	case <-time.After(timeout):
		t.Fatalf("no sideband event within %v", timeout)
	}
	return nil
}

// closeStatus drains the sideband until it closes and returns its close code.
func (c *sidebandConn) closeStatus(t *testing.T, timeout time.Duration) websocket.StatusCode {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case _, ok := <-c.events:
			if !ok {
				<-c.done
				return websocket.CloseStatus(c.closeErr)
			}
		case <-deadline:
			t.Fatalf("the sideband stayed open for %v", timeout)
		}
	}
}

// dialRefused dials a WebSocket that must be refused before the upgrade; it returns the HTTP
// status and the error message of the OpenAI-shaped body.
func dialRefused(t *testing.T, url, key string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	require.Error(t, err)
	require.NotNil(t, resp)
	var e struct {
		Error struct{ Message string }
	}
	if resp.Body != nil {
		_ = json.NewDecoder(resp.Body).Decode(&e)
		_ = resp.Body.Close()
	}
	return resp.StatusCode, e.Error.Message
}
