package test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// TestClientCloseLogged drives the real bin/omniserve: a client that closes its connection with
// a close frame ended the session on purpose, and the log says client_close; one that drops the
// connection (no close frame, resume off) is logged as disconnect.
func TestClientCloseLogged(t *testing.T) {
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--log-format", "json",
		"--resume-grace", "0", "--cache-dir", filepath.Join(t.TempDir(), "cache"))
	open := func() (*websocket.Conn, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ws, _, err := websocket.Dial(ctx, "ws://"+s.addr+"/v1/realtime", nil) //nolint:bodyclose // coder/websocket closes it
		require.NoError(t, err)
		_, b, err := ws.Read(ctx)
		require.NoError(t, err)
		var ev struct {
			Session struct {
				ID string `json:"id"`
			} `json:"session"`
		}
		require.NoError(t, json.Unmarshal(b, &ev))
		return ws, ev.Session.ID
	}
	ended := func(id string) string {
		var reason string
		require.Eventually(t, func() bool {
			for _, line := range strings.Split(s.logs.String(), "\n") {
				var r map[string]any
				if json.Unmarshal([]byte(line), &r) == nil && r["msg"] == "session ended" && r["session_id"] == id {
					reason, _ = r["reason"].(string)
					return true
				}
			}
			return false
		}, 15*time.Second, 20*time.Millisecond, "no 'session ended' for %s", id)
		return reason
	}
	ws, id := open()
	require.NoError(t, ws.Close(websocket.StatusNormalClosure, "bye"))
	require.Equal(t, "client_close", ended(id))
	ws, id = open()
	_ = ws.CloseNow()
	require.Equal(t, "disconnect", ended(id))
}
