package server

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/api"
	"github.com/omniserve/omniserve/internal/config"
	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

// dialBuilt builds a server from cfg, serves its handler on loopback and opens a WebSocket to
// path; the connection, the server and its parts are closed at cleanup. ctx bounds the test.
func dialBuilt(t *testing.T, cfg config.Config, path string) (context.Context, *websocket.Conn) {
	t.Helper()
	s := New(cfg, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	require.NoError(t, s.Build(ctx))
	t.Cleanup(func() {
		closeCtx, cancelClose := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancelClose()
		s.Close(closeCtx)
	})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+path, nil) //nolint:bodyclose // coder/websocket closes it
	require.NoError(t, err)
	t.Cleanup(func() { _ = ws.CloseNow() })
	return ctx, ws
}

// TestRealtimeKnobsReachTheEndpoint: the realtime settings of the config reach the endpoint
// and the sessions the server builds (a knob that is parsed but never used fails here).
func TestRealtimeKnobsReachTheEndpoint(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	cfg.Realtime.IdleTimeout = 7 * time.Second
	cfg.Realtime.MaxEventBytes = 4096
	ctx, ws := dialBuilt(t, cfg, "/v1/realtime?duplex=1")
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

// TestPipelineVADIsTheSessionDefault: pipeline.thinker.vad is the server_vad default of every
// realtime session (session.created), and a turn_detection object without values starts from it.
func TestPipelineVADIsTheSessionDefault(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "omni.yaml")
	require.NoError(t, os.WriteFile(file, []byte("pipeline:\n  thinker:\n    vad:\n      silence_duration_ms: 700\n      prefix_padding_ms: 200\n"), 0o600))
	cfg, err := config.Resolve(config.Sources{ConfigFlag: file, ConfigFlagSet: true, Flags: []config.FlagValue{
		{Name: "model", Value: "dummy:tiny"}, {Name: "device", Value: "cpu"}, {Name: "cache-dir", Value: t.TempDir()},
	}})
	require.NoError(t, err)
	ctx, ws := dialBuilt(t, cfg, "/v1/realtime")
	read := func(want string) map[string]any {
		for {
			_, b, err := ws.Read(ctx)
			require.NoError(t, err)
			var m map[string]any
			require.NoError(t, json.Unmarshal(b, &m))
			if m["type"] == want {
				return m
			}
		}
	}
	td := func(ev map[string]any) map[string]any {
		return ev["session"].(map[string]any)["audio"].(map[string]any)["input"].(map[string]any)["turn_detection"].(map[string]any)
	}
	got := td(read("session.created"))
	require.InDelta(t, 700.0, got["silence_duration_ms"], 0, "the pipeline's VAD default")
	require.InDelta(t, 200.0, got["prefix_padding_ms"], 0)

	update := `{"type":"session.update","session":{"type":"realtime","audio":{"input":{"turn_detection":{"type":"server_vad","threshold":0.6}}}}}`
	require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte(update)))
	got = td(read("session.updated"))
	require.InDelta(t, 700.0, got["silence_duration_ms"], 0, "an object without the field keeps the server's default")
	require.InDelta(t, 0.6, got["threshold"], 1e-9)
	require.NoError(t, ws.Close(websocket.StatusNormalClosure, ""))
}

// TestDefaultsAgree: a component built without a setting uses the server's own default for it,
// so the config table (which docs/CONFIG.md follows, TestConfigDocComplete) and the components'
// zero-value defaults cannot drift apart.
func TestDefaultsAgree(t *testing.T) {
	d := config.Defaults()
	require.Equal(t, d.Server.MaxBodyBytes, int64(api.DefaultMaxBodyBytes), "server.max_body_bytes")

	m := session.ManagerConfig{}.WithDefaults()
	require.Equal(t, d.Server.MaxSessions, m.MaxSessions, "server.max_sessions")
	require.Equal(t, d.Server.MaxIdleTimeout, m.MaxIdleTimeout, "server.max_idle_timeout")
	require.Equal(t, d.EffectiveIdleTimeout(), m.IdleTimeout, "realtime.idle_timeout")
	require.Equal(t, d.Server.SessionInboxBytes, m.MaxInboxBytes, "server.session_inbox_bytes")
	require.Equal(t, d.Server.SessionHistoryBytes, m.MaxHistoryBytes, "server.session_history_bytes")
	require.Equal(t, d.Server.MaxInstructionsBytes, m.MaxInstructionsBytes, "server.max_instructions_bytes")
	require.Equal(t, d.Server.PrefillBudgetTokens, m.PrefillBudgetTokens, "server.prefill_budget_tokens")
	require.Equal(t, d.Realtime.MaxSessionLength, m.MaxSessionLength, "realtime.max_session_length")

	h := realtime.HandlerConfig{}.WithDefaults()
	require.Equal(t, d.Realtime.HandshakeTimeout, h.HandshakeTimeout, "realtime.handshake_timeout")
	require.Equal(t, d.Realtime.WriteTimeout, h.WriteTimeout, "realtime.write_timeout")
	require.Equal(t, d.Realtime.MaxEventBytes, h.MaxEventBytes, "realtime.max_event_bytes")
	require.Equal(t, d.Realtime.SendQueueEvents, h.SendQueue, "realtime.send_queue_events")
	require.Equal(t, d.Server.SessionOutputBytes, h.SendQueueBytes, "server.session_output_bytes")
	require.Equal(t, d.Realtime.ResumeJournalBytes, h.JournalBytes, "realtime.resume_journal_bytes")
	require.Equal(t, d.Realtime.ResumeJournalEvents, h.JournalEvents, "realtime.resume_journal_events")
}
