package test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDroppedClientsNeverBlockANewOne: with --max-sessions 2 and the default resume grace, two
// clients that drop mid-response (no close frame) keep their sessions for a resume, and a
// third client is still admitted: the oldest detached session gives its slot (its turn is
// logged as a close, omniserve_duplex_evictions_total counts it, and its resume answers
// session_not_found), while the newer one can still be resumed.
func TestDroppedClientsNeverBlockANewOne(t *testing.T) {
	raw, err := os.ReadFile("/usr/share/pocketsphinx/test/data/goforward.raw")
	require.NoError(t, err, "install pocketsphinx-testdata")
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--log-stats", "--log-format", "json",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"), "--max-sessions", "2")
	url := "ws://" + s.addr + "/v1/realtime"

	// open starts a spoken manual turn and returns once its response is sending audio.
	open := func() (c *resumeConn, id, token string) {
		c = dialResume(t, url)
		created := c.next(t, 10*time.Second)
		require.Equal(t, "session.created", created["type"], "%v", created)
		id = created["session"].(map[string]any)["id"].(string)
		token, _ = created["resume_token"].(string)
		c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime",
			"audio": map[string]any{"input": map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 16000}, "turn_detection": nil}}}})
		for i := 0; i < len(raw); i += 3200 {
			c.send(t, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(raw[i:min(i+3200, len(raw))])})
		}
		c.send(t, map[string]any{"type": "input_audio_buffer.commit"})
		c.send(t, map[string]any{"type": "response.create"})
		for {
			ev := c.next(t, 60*time.Second)
			require.NotEqual(t, "error", ev["type"], "%v", ev)
			if ev["type"] == "response.output_audio.delta" {
				return c, id, token
			}
		}
	}
	first, firstID, firstToken := open()
	first.drop()
	require.Eventually(t, func() bool { return metricValue(t, s, "omniserve_duplex_detached_sessions") == 1 }, 10*time.Second, 20*time.Millisecond)
	second, secondID, _ := open()
	second.drop()
	require.Eventually(t, func() bool { return metricValue(t, s, "omniserve_duplex_detached_sessions") == 2 }, 10*time.Second, 20*time.Millisecond)

	began := time.Now()
	third := dialResume(t, url)
	created := third.next(t, 10*time.Second)
	require.Equal(t, "session.created", created["type"], "a third client is admitted: %v", created)
	t.Logf("admission over two detached sessions took %v", time.Since(began))
	require.Equal(t, 1.0, metricValue(t, s, "omniserve_duplex_evictions_total"))
	require.Equal(t, 1.0, metricValue(t, s, "omniserve_duplex_detached_sessions"), "the newer detached session is kept")
	require.Contains(t, s.logs.String(), "evicting the oldest detached session")

	// The evicted session is gone for good; the one kept is still there (its id is known).
	again := dialResume(t, "ws://"+s.addr+"/v1/realtime?session_id="+firstID)
	again.send(t, map[string]any{"type": "session.resume", "event_id": "evt_resume", "session_id": firstID, "resume_token": firstToken, "last_received_server_event_seq": 1})
	refused := again.next(t, 10*time.Second)
	require.Equal(t, "error", refused["type"], "%v", refused)
	require.Equal(t, "session_not_found", refused["error"].(map[string]any)["code"])
	require.NotEqual(t, firstID, secondID)
}
