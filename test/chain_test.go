package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRemoteChain runs two real omniserve processes on loopback: the back serves its local
// engine, ASR and TTS; the front's thinker LLM, ASR and TTS are all remote, pointed at the
// back's OpenAI-compatible endpoints. Chat and duplex conversations through the front work,
// a cancel closes the back's request, and killing the back mid-turn fails the front's turn
// with an error event and a finalized turn, the session staying usable when the back returns.
func TestRemoteChain(t *testing.T) {
	raw, err := os.ReadFile(goForwardRaw)
	require.NoError(t, err, "install pocketsphinx-testdata")
	cache := filepath.Join(t.TempDir(), "cache")
	backPort := freePort(t)
	// The back's dummy replies run to their max tokens (2000 words): the cancel below must reach
	// a generation still running, where the default 8-32 words end in milliseconds. The front
	// cannot ask for that itself: with a remote thinker it refuses logit_bias (other vocabulary).
	backArgs := []string{"--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--log-stats",
		"--log-format", "json", "--cache-dir", cache, "--dummy-reply-words", "2000"}
	back := startBinaryAt(t, backPort, backArgs...)
	backURL := "http://" + back.addr + "/v1"

	cfg := filepath.Join(t.TempDir(), "front.yaml")
	remote := func(model string) string {
		return fmt.Sprintf("{base_url: %q, model: %q, first_byte_timeout: 20s, idle_timeout: 20s, retries: 1, retry_backoff: 50ms}", backURL, model)
	}
	require.NoError(t, os.WriteFile(cfg, []byte("pipeline:\n  remote:\n"+
		"    thinker: "+remote("dummy:tiny")+"\n"+
		"    asr: "+remote("whisper-1")+"\n"+
		"    tts: "+remote("tts-1")+"\n"), 0o600))
	front := startBinary(t, "--config", cfg, "--model", "dummy:tiny", "--log-stats", "--log-format", "json", "--cache-dir", cache)
	frontURL := "http://" + front.addr + "/v1"
	require.Contains(t, front.logs.String(), "stage thinker: remote LLM")

	t.Run("chat through the front equals the back", func(t *testing.T) {
		req := map[string]any{"model": "dummy:tiny", "messages": userText("Say something about the weather."),
			"max_tokens": 12, "temperature": 0}
		direct := completeJSON(t, backURL, req)
		via := completeJSON(t, frontURL, req)
		require.NotEmpty(t, *via.Choices[0].Message.Content)
		require.Equal(t, *direct.Choices[0].Message.Content, *via.Choices[0].Message.Content, "the same greedy reply, one hop further")
		// The front's stage table names its remote backends; the back's (all local) keeps
		// the reference layout, with no remote row.
		row := fmt.Sprintf(`"remote":"llm=%s,asr=%s"`, back.addr, back.addr)
		require.Eventually(t, func() bool { return strings.Contains(front.logs.String(), row) }, 5*time.Second, 10*time.Millisecond,
			"no %s in the front's StageRequestStats:\n%s", row, tail(front.logs.String(), 3000))
		require.NotContains(t, back.logs.String(), `"remote":"llm=`)
	})

	t.Run("audio endpoints through the front", func(t *testing.T) {
		code, body := postForm(t, frontURL, map[string]string{"model": "whisper-1"}, "goforward.raw", raw)
		require.Equal(t, http.StatusOK, code, string(body))
		require.JSONEq(t, `{"text":"go forward ten meters"}`, string(body))
	})

	t.Run("duplex conversation through the front", func(t *testing.T) {
		c := dialRT(t, front, map[string]any{"turn_detection": nil, "max_response_output_tokens": 8})
		c.respondTo(t, raw)
		tr := c.until(t, "conversation.item.input_audio_transcription.completed", 30*time.Second)
		require.Equal(t, "go forward ten meters", tr["transcript"], "remote ASR")
		c.until(t, "response.output_audio.delta", 30*time.Second) // remote TTS
		done := c.until(t, "response.done", 60*time.Second)
		require.Contains(t, []string{"completed", "incomplete"}, status(done))
		c.close(t)
		row := fmt.Sprintf(`"remote":"tts=%s"`, back.addr)
		require.Eventually(t, func() bool { return strings.Contains(front.logs.String(), row) }, 5*time.Second, 10*time.Millisecond,
			"no %s in the front's duplex StageRequestStats", row)
	})

	t.Run("auto_response turn through the front", func(t *testing.T) {
		// The engine VAD's endpoint cuts the utterance; the remote transcription, the user
		// item and the response follow from the stream's transcriber, off the audio path.
		c := dialRT(t, front, map[string]any{"turn_detection": nil, "modalities": []string{"text"},
			"max_response_output_tokens": 8, "extra_body": map[string]any{"auto_response": true}})
		c.stream(t, append(append([]byte{}, raw...), make([]byte, 32000)...), 0) // + 1 s of silence
		tr := c.until(t, "conversation.item.input_audio_transcription.completed", 30*time.Second)
		require.Equal(t, "go forward ten meters", tr["transcript"], "remote ASR")
		require.Contains(t, []string{"completed", "incomplete"}, status(c.until(t, "response.done", 60*time.Second)))
		c.close(t)
	})

	t.Run("cancel closes the back's request", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp := postChat(t, ctx, frontURL, map[string]any{"model": "dummy:tiny", "messages": userText("talk for a long time"),
			"stream": true, "max_tokens": 2000, "stop": []string{neverStop}})
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		firstContent(t, bufio.NewReader(resp.Body))
		before := strings.Count(back.logs.String(), "reason=abort")
		cancel()
		require.Eventually(t, func() bool { return strings.Count(back.logs.String(), "reason=abort") > before },
			5*time.Second, 10*time.Millisecond, "the back's generation was not aborted:\n%s", tail(back.logs.String(), 3000))
	})

	t.Run("remote_thinker_overhead_ms_p50", func(t *testing.T) {
		n := 30
		if v, err := strconv.Atoi(os.Getenv("OMNISERVE_OVERHEAD_SAMPLES")); err == nil && v > 0 {
			n = v
		}
		req := map[string]any{"model": "dummy:tiny", "messages": userText("Say something about the weather."),
			"max_tokens": 4, "temperature": 0, "stream": true}
		var diffs, directs, fronts []float64
		for i := range n {
			// Alternate which goes first so that warm-up and drift do not favour one side.
			d, f := 0.0, 0.0
			if i%2 == 0 {
				d, f = ttftMs(t, backURL, req), ttftMs(t, frontURL, req)
			} else {
				f, d = ttftMs(t, frontURL, req), ttftMs(t, backURL, req)
			}
			directs, fronts, diffs = append(directs, d), append(fronts, f), append(diffs, f-d)
		}
		p50 := median(diffs)
		t.Logf("remote_thinker_overhead_ms_p50=%.2f (n=%d pairs; ttft p50 direct %.2f ms, via front %.2f ms)",
			p50, n, median(directs), median(fronts))
		require.Less(t, p50, 50.0, "a remote thinker should add one loopback hop, not more")
	})

	t.Run("a front with a remote thinker loads no model", func(t *testing.T) {
		// The main front's --model dummy:tiny was not loaded either; this one names a file
		// that does not exist, which is then only the id it serves.
		require.NotContains(t, front.logs.String(), `"msg":"model loaded"`)
		require.Contains(t, front.logs.String(), "no local engine: the thinker is remote")
		require.NotContains(t, front.logs.String(), "asr model loaded", "the ASR is remote too")
		noCfg := filepath.Join(t.TempDir(), "nomodel.yaml")
		require.NoError(t, os.WriteFile(noCfg, []byte("pipeline:\n  remote:\n    thinker: "+remote("dummy:tiny")+"\n"), 0o600))
		nm := startBinary(t, "--config", noCfg, "--model", "/nonexistent/dir/front-model.gguf", "--log-format", "json", "--cache-dir", cache)
		code, models := nm.get(t, "/v1/models")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, string(models), `"id":"front-model"`)
		req := map[string]any{"model": "front-model", "messages": userText("Say something about the weather."),
			"max_tokens": 12, "temperature": 0}
		via := completeJSON(t, "http://"+nm.addr+"/v1", req)
		req["model"] = "dummy:tiny"
		direct := completeJSON(t, backURL, req)
		require.Equal(t, *direct.Choices[0].Message.Content, *via.Choices[0].Message.Content)
		require.Equal(t, "front-model", via.Model, "the front answers with its own id")
		require.NotContains(t, nm.logs.String(), `"msg":"model loaded"`)
	})

	t.Run("upstream errors keep their status", func(t *testing.T) {
		// A second front: its thinker asks the back for a model it does not have (the back
		// answers 404 model_not_found), its ASR points at a port nothing listens on.
		nowhere := fmt.Sprintf("http://127.0.0.1:%d/v1", freePort(t))
		badCfg := filepath.Join(t.TempDir(), "bad.yaml")
		require.NoError(t, os.WriteFile(badCfg, []byte("pipeline:\n  remote:\n"+
			fmt.Sprintf("    thinker: {base_url: %q, model: no-such-model, retries: -1}\n", backURL)+
			fmt.Sprintf("    asr: {base_url: %q, model: whisper-1, retries: -1}\n", nowhere)), 0o600))
		bad := startBinary(t, "--config", badCfg, "--model", "/nonexistent/garbage.gguf", "--log-format", "json")
		badURL := "http://" + bad.addr + "/v1"
		for _, stream := range []bool{false, true} {
			resp := postChat(t, context.Background(), badURL, map[string]any{"model": "garbage",
				"messages": userText("hi"), "max_tokens": 4, "stream": stream})
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusNotFound, resp.StatusCode, "stream=%v: %s", stream, got)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var e struct {
				Error struct{ Message, Type, Param, Code string }
			}
			require.NoError(t, json.Unmarshal(got, &e), string(got))
			require.Equal(t, "model_not_found", e.Error.Code, string(got))
			require.Equal(t, "model", e.Error.Param)
			require.Equal(t, "invalid_request_error", e.Error.Type)
			require.Contains(t, e.Error.Message, "remote thinker (upstream status 404)")
			require.NotContains(t, e.Error.Message, back.addr, "the upstream's address is not told")
		}
		code, body := postForm(t, badURL, map[string]string{"model": "whisper-1"}, "goforward.raw", raw)
		require.Equal(t, http.StatusBadGateway, code, string(body))
		require.Contains(t, string(body), `"code":"upstream_error"`)
		require.Contains(t, string(body), "remote asr")

		c := dialRT(t, bad, map[string]any{"turn_detection": nil})
		c.send(t, textItem("hello"))
		c.until(t, "conversation.item.added", 10*time.Second)
		c.send(t, map[string]any{"type": "response.create", "response": map[string]any{"output_modalities": []string{"text"}}})
		ev := c.untilType(t, "error", 30*time.Second)
		e, _ := ev["error"].(map[string]any)
		require.Equal(t, "model_not_found", e["code"], ev)
		require.Equal(t, "invalid_request_error", e["type"], ev)
		require.Contains(t, e["message"], "remote thinker (upstream status 404)", ev)
		require.Equal(t, "failed", status(c.until(t, "response.done", 10*time.Second)))
		c.close(t)
	})

	t.Run("back killed mid-turn, then back again", func(t *testing.T) {
		c := dialRT(t, front, map[string]any{"turn_detection": nil, "modalities": []string{"text"}, "max_response_output_tokens": 2000})
		c.respondTo(t, raw)
		c.until(t, "response.output_text.delta", 30*time.Second)
		require.NoError(t, back.cmd.Process.Kill())
		<-back.done
		ev := c.untilType(t, "error", 30*time.Second)
		msg, _ := ev["error"].(map[string]any)["message"].(string)
		require.Contains(t, msg, "remote thinker", ev)
		done := c.until(t, "response.done", 10*time.Second)
		require.Equal(t, "failed", status(done))

		back = startBinaryAt(t, backPort, backArgs...)
		c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"max_response_output_tokens": 8}})
		c.until(t, "session.updated", 10*time.Second)
		c.respondTo(t, raw)
		require.Contains(t, []string{"completed", "incomplete"}, status(c.until(t, "response.done", 60*time.Second)),
			"the session works again once the back is back")
		c.close(t)
	})
}

// untilType is until without failing on error events: it returns the first event of typ.
func (c *rtClient) untilType(t *testing.T, typ string, timeout time.Duration) map[string]any {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-c.events:
			require.True(t, ok, "connection ended while waiting for %s", typ)
			if ev.m["type"] == typ {
				return ev.m
			}
		case <-deadline:
			t.Fatalf("no %s within %s", typ, timeout)
		}
	}
}

// ttftMs streams one chat completion and returns the time to its first content delta.
func ttftMs(t *testing.T, base string, req map[string]any) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	resp := postChat(t, ctx, base, req)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	firstContent(t, bufio.NewReader(resp.Body))
	ms := float64(time.Since(start)) / float64(time.Millisecond)
	_, _ = io.Copy(io.Discard, resp.Body)
	return ms
}

// firstContent reads SSE lines until the first non-empty content delta.
func firstContent(t *testing.T, br *bufio.Reader) {
	t.Helper()
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		var c chatChunk
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok && json.Unmarshal([]byte(d), &c) == nil &&
			len(c.Choices) == 1 && c.Choices[0].Delta.Content != nil && *c.Choices[0].Delta.Content != "" {
			return
		}
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// startBinaryAt is startBinary on a given port, so that a killed server can come back at the
// address its clients know.
func startBinaryAt(t *testing.T, port int, args ...string) *binServer {
	t.Helper()
	all := append([]string{"serve", "--host", "127.0.0.1", "--port", strconv.Itoa(port)}, args...)
	cmd := exec.Command(omniserveBin(t), all...)
	cmd.Dir = repoRoot(t)
	s := &binServer{cmd: cmd, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), logs: &syncBuf{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = s.logs, s.logs
	require.NoError(t, cmd.Start())
	go func() { s.err = cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			_ = cmd.Process.Kill()
			<-s.done
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-s.done:
			t.Fatalf("omniserve exited before ready: %v\n%s", s.err, s.logs.String())
		default:
		}
		if code, _ := s.get(t, "/ready"); code == http.StatusOK {
			return s
		}
		require.True(t, time.Now().Before(deadline), "not ready in time:\n%s", s.logs.String())
		time.Sleep(50 * time.Millisecond)
	}
}
