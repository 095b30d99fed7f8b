package test

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startToolSession is the setup the tool, MCP and tool-tracing tests share: the binary on the
// CPU config with the dummy model and JSON logs (plus env and args), and a realtime session
// dialled with headers h, its session.created read.
func startToolSession(t *testing.T, env []string, h http.Header, args ...string) (*binServer, *resumeConn) {
	t.Helper()
	all := append([]string{"--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--log-format", "json",
		"--cache-dir", filepath.Join(t.TempDir(), "cache")}, args...)
	s := startBinaryEnv(t, env, all...)
	c := dialResumeHeader(t, "ws://"+s.addr+"/v1/realtime", h)
	require.Equal(t, "session.created", c.next(t, 10*time.Second)["type"])
	return s, c
}

// until reads events up to the first of type typ and returns it with every event read (it
// included). An error event fails the test unless typ is "error".
func (c *resumeConn) until(t *testing.T, typ string) (map[string]any, []map[string]any) {
	t.Helper()
	var seen []map[string]any
	for {
		ev := c.next(t, 60*time.Second)
		seen = append(seen, ev)
		if ev["type"] == typ {
			return ev, seen
		}
		if typ != "error" {
			require.NotEqual(t, "error", ev["type"], "%v", ev)
		}
	}
}
