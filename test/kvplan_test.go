package test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// TestKVPlanAdmission: a cache of 4096 cells holds two 2048-cell windows, so with
// --max-sessions 4 the server admits two realtime sessions (logged at start-up), both of which
// are answered, and refuses a third client up front with HTTP 503 in OpenAI's error shape rather
// than admitting it into a session whose first turn could not get a sequence. The cache is never
// found full, and the Prometheus families show the plan.
func TestKVPlanAdmission(t *testing.T) {
	raw, err := os.ReadFile("/usr/share/pocketsphinx/test/data/goforward.raw")
	require.NoError(t, err, "install pocketsphinx-testdata")
	s := startBinaryEnv(t, []string{"OMNISERVE_CONTEXT_SIZE=4096"}, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"), "--max-sessions", "4")
	require.Contains(t, s.logs.String(), "KV cache plan: admitting fewer realtime sessions than server.max_sessions")
	require.Equal(t, 4096.0, metricValue(t, s, "omniserve_engine_kv_cells"))
	url := "ws://" + s.addr + "/v1/realtime"

	// answered opens a session and has a spoken manual turn answered with audio.
	answered := func() *resumeConn {
		c := dialResume(t, url)
		created := c.next(t, 10*time.Second)
		require.Equal(t, "session.created", created["type"], "%v", created)
		c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime",
			"audio": map[string]any{"input": map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 16000}, "turn_detection": nil}}}})
		for i := 0; i < len(raw); i += 3200 {
			c.send(t, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(raw[i:min(i+3200, len(raw))])})
		}
		c.send(t, map[string]any{"type": "input_audio_buffer.commit"})
		c.send(t, map[string]any{"type": "response.create", "response": map[string]any{"max_output_tokens": 8}})
		for {
			ev := c.next(t, 60*time.Second)
			require.NotEqual(t, "error", ev["type"], "%v", ev)
			if ev["type"] == "response.done" {
				return c
			}
		}
	}
	answered()
	answered()
	require.Equal(t, 4096.0, metricValue(t, s, "omniserve_engine_kv_cells_reserved"), "two sessions hold a window each")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, url, nil)
	if ws != nil {
		ws.CloseNow()
	}
	require.Error(t, err, "a third session would not get a sequence: it is refused before its upgrade")
	require.NotNil(t, resp)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	var body struct {
		Error struct{ Type, Code, Message string }
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Equal(t, "resource_exhausted", body.Error.Code, "%+v", body)
	require.Contains(t, body.Error.Message, "limit=2")
	require.Zero(t, metricValue(t, s, "omniserve_engine_kv_cache_full_total"))
}
