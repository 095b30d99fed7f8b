package test

import (
	"bufio"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestShutdownKeepsItsPromise sends SIGTERM to the real binary with a realtime session open and
// a long streaming chat running: the session is told at once (session.closing with the grace),
// /ready answers 503 while probes still work, the session is closed with reason shutdown after
// --drain-grace, the chat cut by the timeout ends with an error chunk, and the process exits
// within --shutdown-timeout.
func TestShutdownKeepsItsPromise(t *testing.T) {
	t.Parallel()
	const timeout, grace = 6 * time.Second, 2 * time.Second
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"),
		"--shutdown-timeout", timeout.String(), "--drain-grace", grace.String())
	c := dialRT(t, s, map[string]any{"turn_detection": nil, "modalities": []string{"text"}})

	// A chat long enough to outlive the timeout: the talker voices a long reply (the dummy's end
	// banned, test/chat_test.go banEOS, so it runs to its 2000 tokens).
	body := `{"model":"dummy:tiny","stream":true,"max_tokens":2000,"logit_bias":{"2":-100},"modalities":["text","audio"],` +
		`"audio":{"voice":"alloy","format":"pcm16"},"messages":[{"role":"user","content":"tell me a long story"}]}`
	resp, err := http.Post("http://"+s.addr+"/v1/chat/completions", "application/json", strings.NewReader(body)) //nolint:noctx // bounded by the server under test
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	lines := make(chan string, 1<<16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "data: ") {
				lines <- l
			}
		}
	}()
	first := <-lines
	require.Contains(t, first, "chat.completion.chunk")

	signalled := time.Now()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	closing := c.until(t, "session.closing", 3*time.Second)
	require.Less(t, time.Since(signalled), 2*time.Second, "told at once")
	require.Equal(t, "shutdown", closing["reason"])
	require.InDelta(t, float64(grace.Milliseconds()), closing["grace_ms"], 1)
	code, _ := s.get(t, "/ready")
	require.Equal(t, http.StatusServiceUnavailable, code, "/ready is 503 while draining")
	code, _ = s.get(t, "/health")
	require.Equal(t, http.StatusOK, code, "the listener stays up for probes")

	closed := c.until(t, "session.closed", timeout)
	after := time.Since(signalled)
	require.Equal(t, "shutdown", closed["reason"])
	require.GreaterOrEqual(t, after, grace-200*time.Millisecond, "the session got its drain grace")
	require.Less(t, after, grace+2*time.Second)

	var last string
	for l := range lines {
		last = l
	}
	require.Equal(t, 0, s.exitCode(t, timeout+3*time.Second), s.logs.String())
	require.Less(t, time.Since(signalled), timeout+time.Second, "exit within --shutdown-timeout")
	require.Contains(t, last, "shutting_down", "the chat cut by the timeout ends with an error chunk")
}
