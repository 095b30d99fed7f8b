package test

import (
	"net/http"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRealtimeTranscriptionItemCancelled: on the real binary with --log-stats, a transcription
// session (server VAD) hears the user start speaking (speech_started names the item) and the
// client closes the session (session.close) before the end of the utterance. The item is not
// lost from the statistics: its TranscriptionItemStats record says outcome cancelled, reason
// client_close, and
// omniserve_realtime_transcription_items_total counts it under outcome="cancelled".
func TestRealtimeTranscriptionItemCancelled(t *testing.T) {
	t.Parallel()
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--log-stats",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	c := dialResume(t, "ws://"+s.addr+"/v1/realtime?intent=transcription")
	require.Equal(t, "session.created", c.next(t, 10*time.Second)["type"])
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{
		"type": "transcription",
		"audio": map[string]any{"input": map[string]any{
			"format":         map[string]any{"type": "audio/pcm", "rate": 24000},
			"turn_detection": map[string]any{"type": "server_vad", "silence_duration_ms": 500},
		}},
	}})
	collectUntil(t, c, "session.updated", 10*time.Second)
	speech := speech24k(t, 0)
	sendAudio(t, c, speech[:len(speech)/2]) // the first half: speech starts, never ends
	started, _ := c.until(t, "input_audio_buffer.speech_started")
	item := started["item_id"].(string)
	c.send(t, map[string]any{"type": "session.close"})
	closed := collectUntil(t, c, "session.closed", 10*time.Second)
	require.Equal(t, "client_close", closed[len(closed)-1]["reason"])

	// --log-stats with JSON logs: the item's record (the table's fields).
	table := regexp.MustCompile(`"msg":"TranscriptionItemStats".*"item_id":"` + regexp.QuoteMeta(item) + `","outcome":"cancelled","reason":"client_close"`)
	require.Eventually(t, func() bool { return table.MatchString(s.logs.String()) }, 10*time.Second, 50*time.Millisecond,
		"no cancelled record of %s", item)
	code, body := s.get(t, "/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Regexp(t, `(?m)^omniserve_realtime_transcription_items_total\{[^}]*outcome="cancelled"[^}]*\} 1$`, string(body))
}
