package server

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// TestRealtimeKnobsReachTheEndpoint: the realtime settings of the config reach the endpoint
// and the sessions the server builds (a knob that is parsed but never used fails here).
func TestRealtimeKnobsReachTheEndpoint(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Realtime.IdleTimeout = 7 * time.Second
	cfg.Realtime.MaxEventBytes = 4096
	s := New(cfg, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	require.NoError(t, s.Build(ctx))
	defer func() {
		closeCtx, cancelClose := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancelClose()
		s.Close(closeCtx)
	}()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/realtime?duplex=1", nil) //nolint:bodyclose // coder/websocket closes it
	require.NoError(t, err)
	defer ws.CloseNow()
	read := func() map[string]any {
		_, b, err := ws.Read(ctx)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		return m
	}
	created := read()
	require.Equal(t, "session.created", created["type"])
	require.InDelta(t, 7.0, created["session"].(map[string]any)["idle_timeout_s"], 0.001, "realtime.idle_timeout")

	big := `{"type":"conversation.item.create","event_id":"big","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"` +
		strings.Repeat("a", 5000) + `"}]}}`
	require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(big)))
	ev := read()
	require.Equal(t, "error", ev["type"])
	require.Equal(t, "event_too_large", ev["error"].(map[string]any)["code"], "realtime.max_event_bytes")
	require.NoError(t, ws.Close(websocket.StatusNormalClosure, ""))
}
