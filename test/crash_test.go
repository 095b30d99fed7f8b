package test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCrashRestartInPlace: llama.cpp, pocketsphinx and flite run in the server's process, so a
// fault in native code ends the process and every session on it (docs/DEPLOY.md, "When native
// code crashes"). What the server promises instead is that it comes back in place: the same
// command on the same port is ready again at once (the listener does not linger), a new session
// works, and a client resuming a session of the dead process is told session_not_found rather
// than left waiting. The crash is a SIGSEGV delivered to the process, which the Go runtime
// handles as it handles a fault in cgo code: the process dies with the signal's exit.
func TestCrashRestartInPlace(t *testing.T) {
	raw, err := os.ReadFile("/usr/share/pocketsphinx/test/data/goforward.raw")
	require.NoError(t, err, "install pocketsphinx-testdata")
	port := freePort(t)
	args := []string{"--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--log-format", "json",
		"--cache-dir", filepath.Join(t.TempDir(), "cache")}
	s := startBinaryAt(t, port, args...)
	url := "ws://" + s.addr + "/v1/realtime?duplex=1"

	c := dialResume(t, url)
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"turn_detection": nil,
		"max_response_output_tokens": 48, "input_audio_format": map[string]any{"type": "pcm16", "rate": 16000}}})
	created := c.next(t, 10*time.Second)
	require.Equal(t, "session.created", created["type"])
	id := created["session"].(map[string]any)["id"].(string)
	token, _ := created["resume_token"].(string)
	require.NotEmpty(t, token)
	for i := 0; i < len(raw); i += 3200 {
		c.send(t, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(raw[i:min(i+3200, len(raw))])})
	}
	c.send(t, map[string]any{"type": "input_audio_buffer.commit", "response_create": true})
	for {
		ev := c.next(t, 60*time.Second)
		require.NotEqual(t, "response.done", ev["type"], "the response ended before the crash")
		if ev["type"] == "response.output_audio.delta" {
			break // the engine is mid-response
		}
	}

	require.NoError(t, s.cmd.Process.Signal(syscall.SIGSEGV))
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the process outlived a segmentation fault")
	}
	require.Error(t, s.err, "a crash is not a clean exit")
	select {
	case <-c.done: // the client's connection ended with the process
	case <-time.After(5 * time.Second):
		t.Fatal("the client's connection outlived the process")
	}

	start := time.Now()
	s2 := startBinaryAt(t, port, args...)
	t.Logf("restart in place: ready %v after the restart began", time.Since(start).Round(time.Millisecond))

	// The dead process's session is gone, and the client is told so at once.
	r := dialResume(t, url+"&session_id="+id)
	r.send(t, map[string]any{"type": "session.resume", "event_id": "r1", "session_id": id, "resume_token": token,
		"last_received_server_event_seq": 1})
	ev := r.next(t, 10*time.Second)
	require.Equal(t, "error", ev["type"])
	require.Equal(t, "session_not_found", ev["error"].(map[string]any)["code"])

	// A new session works end to end.
	n := dialResume(t, url)
	n.send(t, map[string]any{"type": "session.update", "session": map[string]any{"turn_detection": nil,
		"max_response_output_tokens": 8, "modalities": []string{"text"}, "input_audio_format": map[string]any{"type": "pcm16", "rate": 16000}}})
	require.Equal(t, "session.created", n.next(t, 10*time.Second)["type"])
	for i := 0; i < len(raw); i += 3200 {
		n.send(t, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(raw[i:min(i+3200, len(raw))])})
	}
	n.send(t, map[string]any{"type": "input_audio_buffer.commit", "response_create": true})
	var transcript string
	for {
		ev := n.next(t, 60*time.Second)
		if ev["type"] == "conversation.item.input_audio_transcription.completed" {
			transcript, _ = ev["transcript"].(string)
		}
		if ev["type"] == "response.done" {
			break
		}
	}
	require.Equal(t, "go forward ten meters", transcript)
	require.NotContains(t, s2.logs.String(), token, "the resume token is never logged")
}
