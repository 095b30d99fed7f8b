package test

import (
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
)

// speech24k is goforward.raw (real speech, 16 kHz) at OpenAI's 24 kHz, with silence after it.
func speech24k(t *testing.T, tail time.Duration) []byte {
	t.Helper()
	raw, err := os.ReadFile(goForwardRaw)
	require.NoError(t, err, "install pocketsphinx-testdata")
	pcm16k, err := audio.PCM16BytesToFloat32(nil, raw)
	require.NoError(t, err)
	pcm24k, err := audio.Resample(pcm16k, 16000, 24000)
	require.NoError(t, err)
	pcm24k = append(pcm24k, make([]float32, int(tail.Seconds()*24000))...)
	return audio.Float32ToPCM16Bytes(nil, pcm24k)
}

// sendAudio appends pcm in 100 ms chunks as fast as the socket takes them.
func sendAudio(t *testing.T, c *resumeConn, pcm []byte) {
	t.Helper()
	const chunk = 2 * 2400
	for off := 0; off < len(pcm); off += chunk {
		end := min(off+chunk, len(pcm))
		c.send(t, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(pcm[off:end])})
	}
}

// streamAndCollect appends pcm in real time, 100 ms chunks, reading events meanwhile (with
// their arrival times) until one of type typ.
func streamAndCollect(t *testing.T, c *resumeConn, pcm []byte, typ string, timeout time.Duration) (start time.Time, evs []map[string]any, at []time.Time) {
	t.Helper()
	const chunk = 2 * 2400
	start = time.Now()
	deadline := start.Add(timeout)
	next := 0
	for {
		var due <-chan time.Time
		if next < len(pcm) {
			due = time.After(time.Until(start.Add(time.Duration(next/chunk) * 100 * time.Millisecond)))
		}
		select {
		case <-due:
			end := min(next+chunk, len(pcm))
			c.send(t, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(pcm[next:end])})
			next = end
		case ev, ok := <-c.events:
			require.True(t, ok, "the connection ended")
			require.NotEqual(t, "error", ev["type"], "%v", ev)
			evs, at = append(evs, ev), append(at, time.Now())
			if ev["type"] == typ {
				return start, evs, at
			}
		case <-time.After(time.Until(deadline)):
			t.Fatalf("no %s within %v", typ, timeout)
		}
	}
}

// collectUntil reads events until one of type typ, returning every event read (typ's last).
func collectUntil(t *testing.T, c *resumeConn, typ string, timeout time.Duration) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var evs []map[string]any
	for {
		ev := c.next(t, time.Until(deadline))
		evs = append(evs, ev)
		if ev["type"] == typ {
			return evs
		}
		require.NotEqual(t, "error", ev["type"], "%v", ev)
	}
}

// TestRealtimeTranscriptionSession drives ?intent=transcription as OpenAI's realtime
// transcription guide does, on the real binary with real speech: GA session.update with
// type "transcription" and server VAD, then the beta dialect with manual commits. The speech is
// transcribed per committed item (delta, then completed) and nothing ever answers it.
func TestRealtimeTranscriptionSession(t *testing.T) {
	t.Parallel()
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--log-stats",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	base := "ws://" + s.addr + "/v1/realtime"
	speech := speech24k(t, 1500*time.Millisecond)

	t.Run("GA server VAD", func(t *testing.T) {
		c := dialResume(t, base+"?intent=transcription")
		created := c.next(t, 10*time.Second)
		require.Equal(t, "session.created", created["type"])
		sess := created["session"].(map[string]any)
		require.Equal(t, "realtime.transcription_session", sess["object"])
		require.Equal(t, "transcription", sess["type"])

		c.send(t, map[string]any{"type": "session.update", "session": map[string]any{
			"type": "transcription",
			"audio": map[string]any{"input": map[string]any{
				"format":         map[string]any{"type": "audio/pcm", "rate": 24000},
				"transcription":  map[string]any{"model": "gpt-4o-transcribe", "language": "en"},
				"turn_detection": map[string]any{"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500},
			}},
		}})
		updated := collectUntil(t, c, "session.updated", 10*time.Second)
		in := updated[len(updated)-1]["session"].(map[string]any)["audio"].(map[string]any)["input"].(map[string]any)
		require.Equal(t, "server_vad", in["turn_detection"].(map[string]any)["type"])
		require.Equal(t, "pocketsphinx", in["transcription"].(map[string]any)["model"], "the model actually used")

		start, evs, arrived := streamAndCollect(t, c, speech, "conversation.item.input_audio_transcription.completed", 60*time.Second)
		// Paced audio: stream time is wall time since start, so the VAD's audio_end_ms (which,
		// as OpenAI's, includes the silence window, silence_duration_ms 500) places the end of
		// speech on the clock.
		completedAt := arrived[len(arrived)-1]
		for i, ev := range evs {
			if ev["type"] == "input_audio_buffer.speech_stopped" {
				end := start.Add(time.Duration(ev["audio_end_ms"].(float64)-500) * time.Millisecond)
				t.Logf("speech end → transcription completed %d ms (the 500 ms silence window included); speech_stopped → completed %d ms",
					completedAt.Sub(end).Milliseconds(), completedAt.Sub(arrived[i]).Milliseconds())
			}
		}
		var order []string
		var committed, delta string
		var deltaItems []string
		for _, ev := range evs {
			typ := ev["type"].(string)
			require.False(t, strings.HasPrefix(typ, "response."), "a transcription session never responds: %v", ev)
			switch typ {
			case "input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped", "conversation.item.input_audio_transcription.completed":
				order = append(order, typ)
			case "input_audio_buffer.committed":
				order = append(order, typ)
				committed = ev["item_id"].(string)
			case "conversation.item.input_audio_transcription.delta":
				order = append(order, typ)
				delta += ev["delta"].(string)
				deltaItems = append(deltaItems, ev["item_id"].(string))
			}
		}
		t.Logf("event order: %v", order)
		// Deltas stream while the user speaks (the recognizer's settled words), the rest after
		// the commit; all name the committed item, and they add up to the transcript.
		require.Equal(t, "input_audio_buffer.speech_started", order[0])
		require.Equal(t, "conversation.item.input_audio_transcription.completed", order[len(order)-1])
		require.Less(t, slices.Index(order, "input_audio_buffer.speech_stopped"), slices.Index(order, "input_audio_buffer.committed"))
		require.Less(t, slices.Index(order, "conversation.item.input_audio_transcription.delta"), slices.Index(order, "input_audio_buffer.committed"),
			"a delta came before the commit: while the user spoke")
		done := evs[len(evs)-1]
		require.Equal(t, committed, done["item_id"])
		require.Contains(t, strings.ToLower(done["transcript"].(string)), "forward", "pocketsphinx heard the speech")
		require.Equal(t, done["transcript"], delta)
		for _, id := range deltaItems {
			require.Equal(t, committed, id, "every delta names the committed item")
		}
		// --log-stats (JSON logs): one TranscriptionItemStats record per item, and Prometheus times it.
		itemLine := regexp.MustCompile(`"msg":"TranscriptionItemStats".*"item_id":"` + regexp.QuoteMeta(committed) + `".*"commit_to_done_ms":`)
		require.Eventually(t, func() bool { return itemLine.MatchString(s.logs.String()) }, 5*time.Second, 50*time.Millisecond)
		code, metrics := s.get(t, "/metrics")
		require.Equal(t, http.StatusOK, code)
		require.Regexp(t, `(?m)^omniserve_realtime_transcription_latency_seconds_count\{[^}]*\} [1-9]`, string(metrics))
		// The figure agrees with the client's own clock: committed → completed as they arrived
		// (this is the only item the server has transcribed so far).
		var committedAt time.Time
		for i, ev := range evs {
			if ev["type"] == "input_audio_buffer.committed" {
				committedAt = arrived[i]
			}
		}
		client := completedAt.Sub(committedAt).Seconds()
		server := metricValue(t, s, "omniserve_realtime_transcription_latency_seconds_sum")
		logged := regexp.MustCompile(`"commit_to_done_ms":([0-9.]+)`).FindStringSubmatch(s.logs.String())
		require.Len(t, logged, 2)
		t.Logf("commit → transcript: Prometheus %.1f ms, --log-stats %s ms, client (committed → completed arrival) %.1f ms",
			server*1000, logged[1], client*1000)
		require.InDelta(t, client, server, 0.1, "the histogram measures what the client sees")
		loggedMs, err := strconv.ParseFloat(logged[1], 64)
		require.NoError(t, err)
		require.InDelta(t, server*1000, loggedMs, 1, "the log line and the histogram are one measurement")
		require.Equal(t, "duration", done["usage"].(map[string]any)["type"])

		// What a transcription session does not do is an error with its param; it goes on.
		c.send(t, map[string]any{"type": "response.create", "event_id": "evt_rc"})
		e := c.next(t, 10*time.Second)
		require.Equal(t, "error", e["type"])
		require.Equal(t, "type", e["error"].(map[string]any)["param"])
		require.Equal(t, "evt_rc", e["error"].(map[string]any)["event_id"])
		c.send(t, map[string]any{"type": "session.update", "event_id": "evt_in", "session": map[string]any{"type": "transcription", "instructions": "x"}})
		e = c.next(t, 10*time.Second)
		require.Equal(t, "session.instructions", e["error"].(map[string]any)["param"])
		// No event came after: nothing answered the transcript.
		select {
		case ev := <-c.events:
			t.Fatalf("unexpected event %v", ev)
		case <-time.After(500 * time.Millisecond):
		}
	})

	t.Run("beta manual commit", func(t *testing.T) {
		c := dialResumeHeader(t, base+"?intent=transcription", http.Header{"OpenAI-Beta": {"realtime=v1"}})
		created := c.next(t, 10*time.Second)
		require.Equal(t, "transcription_session.created", created["type"])
		c.send(t, map[string]any{"type": "transcription_session.update", "session": map[string]any{
			"input_audio_format":        "pcm16",
			"input_audio_transcription": map[string]any{"model": "whisper-1"},
			"turn_detection":            nil,
		}})
		updated := collectUntil(t, c, "transcription_session.updated", 10*time.Second)
		sess := updated[len(updated)-1]["session"].(map[string]any)
		require.Nil(t, sess["turn_detection"])
		require.Equal(t, "pcm16", sess["input_audio_format"])
		sendAudio(t, c, speech)
		c.send(t, map[string]any{"type": "input_audio_buffer.commit"})
		evs := collectUntil(t, c, "conversation.item.input_audio_transcription.completed", 60*time.Second)
		for _, ev := range evs {
			require.False(t, strings.HasPrefix(ev["type"].(string), "response."), "%v", ev)
		}
		require.Contains(t, strings.ToLower(evs[len(evs)-1]["transcript"].(string)), "forward")
	})

	t.Run("bad intent and conversation switch", func(t *testing.T) {
		resp, err := http.Get("http://" + s.addr + "/v1/realtime?intent=translation")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)

		c := dialResume(t, base)
		require.Equal(t, "session.created", c.next(t, 10*time.Second)["type"])
		c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"type": "transcription"}})
		e := collectUntilError(t, c)
		require.Equal(t, "session.type", e["error"].(map[string]any)["param"])
	})
}

func collectUntilError(t *testing.T, c *resumeConn) map[string]any {
	t.Helper()
	for {
		ev := c.next(t, 10*time.Second)
		if ev["type"] == "error" {
			return ev
		}
	}
}
