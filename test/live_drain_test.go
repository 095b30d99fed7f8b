package test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/rtcclient"
)

// While the server drains (SIGTERM, --drain-grace), a sideband is a new connection like any
// other: GET /v1/live/sessions/{id}/attach and /v1/realtime?call_id= are refused 503
// shutting_down as a new session is, while the sessions they would join are still running and
// a sideband joined before the signal still gets their end.
func TestSidebandRefusedWhileDraining(t *testing.T) {
	t.Parallel()
	const grace = 4 * time.Second
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"), "--api-key", "sk-drain",
		"--shutdown-timeout", "12s", "--drain-grace", grace.String())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := "http://" + s.addr
	cfg, err := json.Marshal(liveRTCSession())
	require.NoError(t, err)
	lv, err := rtcclient.Dial(ctx, rtcclient.Config{BaseURL: base, Key: "sk-drain", Live: cfg})
	require.NoError(t, err, s.logs.String())
	defer lv.Close()
	rt, err := rtcclient.Dial(ctx, rtcclient.Config{BaseURL: base, Key: "sk-drain",
		Session: json.RawMessage(`{"type":"realtime","model":"dummy:tiny"}`)})
	require.NoError(t, err, s.logs.String())
	defer rt.Close()
	liveAttach := "ws://" + s.addr + "/v1/live/sessions/" + lv.SessionID() + "/attach"
	callAttach := "ws://" + s.addr + "/v1/realtime?call_id=" + rt.CallID()
	// Before the signal both sidebands join.
	early := dialSideband(t, liveAttach, "sk-drain")
	dialSideband(t, callAttach, "sk-drain")

	signalled := time.Now()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool { code, _ := s.get(t, "/ready"); return code == http.StatusServiceUnavailable },
		2*time.Second, 20*time.Millisecond, "draining")
	for _, url := range []string{liveAttach, callAttach} {
		code, msg := dialRefused(t, url, "sk-drain")
		require.Equal(t, http.StatusServiceUnavailable, code, url)
		require.Contains(t, msg, "shutting down", url)
	}
	code, msg := dialRefused(t, "ws://"+s.addr+"/v1/live/sessions", "sk-drain")
	require.Equal(t, http.StatusServiceUnavailable, code, "a new Live session gets the same refusal")
	require.Contains(t, msg, "shutting down")
	require.Less(t, time.Since(signalled), grace, "refused while the sessions were still running")
	// The sideband joined before the drain sees its session end (shutdown: connection_lost).
	var closed map[string]any
	for closed == nil {
		if ev := early.next(t, grace+5*time.Second); ev["type"] == "session.closed" {
			closed = ev
		}
	}
	require.Equal(t, "connection_lost", closed["reason"])
	require.Equal(t, 0, s.exitCode(t, 15*time.Second), s.logs.String())
}
