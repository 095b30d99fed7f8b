package test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// TestHostileClients drives one real bin/omniserve the way hostile or unlucky clients do (the
// cases of issue 12, those that were fixed and those that already held): each case asserts the
// documented answer, and afterwards the server still serves a new session and a new request.
func TestHostileClients(t *testing.T) {
	t.Parallel()
	const maxIdle = 20 * time.Second
	cache := filepath.Join(t.TempDir(), "cache")
	require.NoError(t, os.MkdirAll(cache, 0o755))
	// A dummy-model generation killed mid-write leaves this behind; the next start removes it.
	orphan := filepath.Join(cache, "dummy-tiny-v3.gguf.tmp-4242")
	require.NoError(t, os.WriteFile(orphan, []byte("partial"), 0o644))
	killedAt := time.Now().Add(-2 * time.Minute) // a fresh temp file may still be taking its lock
	require.NoError(t, os.Chtimes(orphan, killedAt, killedAt))
	s := startBinaryEnv(t, []string{"OMNISERVE_MAX_IDLE_TIMEOUT=" + maxIdle.String()},
		"--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--cache-dir", cache)
	require.NoFileExists(t, orphan, "an orphan temp file of a killed generation is removed at start")

	t.Run("cases", func(t *testing.T) {
		t.Run("bad session values", func(t *testing.T) {
			t.Parallel()
			c := dialRT(t, s, map[string]any{"modalities": []string{"text"}})
			before := c.update(t, map[string]any{})
			vad := func(k string, v any) map[string]any {
				return map[string]any{"audio": map[string]any{"input": map[string]any{
					"turn_detection": map[string]any{"type": "server_vad", k: v}}}}
			}
			const td = "session.audio.input.turn_detection."
			cases := []struct {
				name        string
				session     map[string]any
				code, param string
			}{
				{"negative silence_duration_ms", vad("silence_duration_ms", -5), "integer_below_min_value", td + "silence_duration_ms"},
				{"negative prefix_padding_ms", vad("prefix_padding_ms", -100), "integer_below_min_value", td + "prefix_padding_ms"},
				{"idle_timeout_ms overflow", vad("idle_timeout_ms", 1e300), "invalid_type", td + "idle_timeout_ms"},
				{"idle_timeout_ms out of range", vad("idle_timeout_ms", 1), "invalid_value", td + "idle_timeout_ms"},
				{"threshold above 1", vad("threshold", 7), "invalid_value", td + "threshold"},
				{"max_response_output_tokens 1e12", map[string]any{"max_response_output_tokens": 1e12}, "invalid_value", "session.max_output_tokens"},
				{"max_output_tokens 1e300", map[string]any{"max_output_tokens": 1e300}, "invalid_value", "session.max_output_tokens"},
				{"10 KiB voice", map[string]any{"audio": map[string]any{"output": map[string]any{"voice": strings.Repeat("v", 10<<10)}}}, "invalid_value", "session.audio.output.voice"},
				{"empty voice", map[string]any{"audio": map[string]any{"output": map[string]any{"voice": ""}}}, "invalid_value", "session.audio.output.voice"},
				{"negative idle_timeout_s", map[string]any{"idle_timeout_s": -1}, "invalid_value", "session.idle_timeout_s"},
				{"temperature 1e12", map[string]any{"temperature": 1e12}, "invalid_value", "session.temperature"},
				{"unknown modality", map[string]any{"output_modalities": []string{"video"}}, "invalid_value", "session.modalities"},
			}
			for i, tc := range cases {
				eventID := fmt.Sprintf("evt_bad_%d", i)
				c.send(t, map[string]any{"type": "session.update", "event_id": eventID, "session": tc.session})
				e := c.nextError(t, 30*time.Second)
				require.Equal(t, tc.code, e["code"], "%s: %v", tc.name, e)
				require.Equal(t, tc.param, e["param"], "%s: %v", tc.name, e)
				require.Equal(t, eventID, e["event_id"], tc.name)
				require.NotEmpty(t, e["message"], tc.name)
			}
			require.Equal(t, before, c.update(t, map[string]any{}), "a refused update changes nothing")

			// Documented as accepted: any voice name of 1-64 characters is a label (one voice).
			got := c.update(t, map[string]any{"audio": map[string]any{"output": map[string]any{"voice": "no-such-voice"}}})
			require.Equal(t, "no-such-voice", got["audio"].(map[string]any)["output"].(map[string]any)["voice"])
			// An idle timeout beyond the server's maximum is capped, never overflowed.
			got = c.update(t, map[string]any{"idle_timeout_s": 1e300})
			require.InDelta(t, maxIdle.Seconds(), got["idle_timeout_s"], 0.001)
			c.close(t)
			requireServes(t, s)
		})

		t.Run("idle client is closed at the server's maximum", func(t *testing.T) {
			t.Parallel()
			c := dialRT(t, s, map[string]any{"turn_detection": nil, "modalities": []string{"text"}})
			got := c.update(t, map[string]any{"idle_timeout_s": 1e9})
			require.InDelta(t, maxIdle.Seconds(), got["idle_timeout_s"], 0.001)
			start := time.Now()
			// vllm-omni's dialect (?duplex=1) ends an idle session with session.expired.
			closed := c.until(t, "session.expired", maxIdle+60*time.Second)
			require.Equal(t, "idle_ttl_expired", closed["reason"])
			require.Greater(t, time.Since(start), maxIdle/2, "closed by the idle timeout, not at once")
			c.waitEnd(t, 10*time.Second)
			requireServes(t, s)
		})

		t.Run("1 MiB instructions", func(t *testing.T) {
			t.Parallel()
			c := dialRT(t, s, map[string]any{"turn_detection": nil, "modalities": []string{"text"}, "max_response_output_tokens": 8})
			before := c.update(t, map[string]any{})
			// Over server.max_instructions_bytes (128 KiB): refused by its size, at once.
			big := strings.Repeat("You are a helpful assistant. ", (1<<20)/29)
			c.send(t, map[string]any{"type": "session.update", "event_id": "evt_big", "session": map[string]any{"instructions": big}})
			e := c.nextError(t, 30*time.Second)
			require.Equal(t, "string_above_max_length", e["code"], "%v", e)
			require.Equal(t, "session.instructions", e["param"])
			require.Equal(t, "evt_big", e["event_id"])
			// Under the byte limit but over the model's context (dummy:tiny, 2048 tokens):
			// refused by the model's context, never prefilled.
			long := strings.Repeat("You are a helpful assistant. ", (100<<10)/29)
			c.send(t, map[string]any{"type": "session.update", "event_id": "evt_long", "session": map[string]any{"instructions": long}})
			e = c.nextError(t, 30*time.Second)
			require.Equal(t, "context_length_exceeded", e["code"], "%v", e)
			require.Equal(t, "session.instructions", e["param"])
			require.Equal(t, "evt_long", e["event_id"])
			require.Equal(t, before, c.update(t, map[string]any{}), "a refused update changes nothing")
			// The session still answers a turn.
			c.send(t, textItem("hello"))
			c.send(t, map[string]any{"type": "response.create"})
			done := c.until(t, "response.done", 2*time.Minute)
			require.Contains(t, []any{"completed", "incomplete"}, done["response"].(map[string]any)["status"], "%v", done)
			c.close(t)
			requireServes(t, s)
		})

		t.Run("invalid UTF-8 inside a JSON string", func(t *testing.T) {
			t.Parallel()
			c := dialRT(t, s, map[string]any{"turn_detection": nil, "modalities": []string{"text"}})
			bad := []byte(`{"type":"conversation.item.create","event_id":"evt_utf8","item":{"type":"message","role":"user",` +
				`"content":[{"type":"input_text","text":"bad ` + "\xff\xfe\xc0\xaf" + ` bytes"}]}}`)
			require.NoError(t, c.ws.Write(c.ctx, websocket.MessageText, bad))
			e := c.nextError(t, 30*time.Second)
			require.Equal(t, "invalid_json", e["code"], "%v", e)
			require.Equal(t, "evt_utf8", e["event_id"])
			c.requireStillServes(t)
			requireServes(t, s)
		})

		t.Run("binary frame", func(t *testing.T) {
			t.Parallel()
			c := dialRT(t, s, map[string]any{"turn_detection": nil, "modalities": []string{"text"}})
			b, err := json.Marshal(textItem("hello"))
			require.NoError(t, err)
			require.NoError(t, c.ws.Write(c.ctx, websocket.MessageBinary, b))
			require.Equal(t, "invalid_json", c.nextError(t, 30*time.Second)["code"])
			c.requireStillServes(t)
			requireServes(t, s)
		})

		t.Run("100k-deep JSON", func(t *testing.T) {
			t.Parallel()
			c := dialRT(t, s, map[string]any{"turn_detection": nil, "modalities": []string{"text"}})
			deep := `{"type":"session.update","session":{"metadata":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}}`
			require.NoError(t, c.ws.Write(c.ctx, websocket.MessageText, []byte(deep)))
			require.Equal(t, "invalid_json", c.nextError(t, 30*time.Second)["code"])
			c.requireStillServes(t)
			requireServes(t, s)
		})

		t.Run("1e6-key object", func(t *testing.T) {
			t.Parallel()
			c := dialRT(t, s, map[string]any{"turn_detection": nil, "modalities": []string{"text"}})
			var b strings.Builder
			b.WriteString(`{"type":"session.update","session":{"instructions":"keys"`)
			for i := range 1000000 {
				fmt.Fprintf(&b, `,"k%d":0`, i)
			}
			b.WriteString(`}}`)
			require.Less(t, b.Len(), 15<<20, "under the event limit: the decoder itself must cope")
			require.NoError(t, c.ws.Write(c.ctx, websocket.MessageText, []byte(b.String())))
			got := c.until(t, "session.updated", time.Minute)
			require.Equal(t, "keys", got["session"].(map[string]any)["instructions"])
			c.requireStillServes(t)
			requireServes(t, s)
		})

		t.Run("frame over the event limit", func(t *testing.T) {
			t.Parallel()
			c := dialRT(t, s, map[string]any{"turn_detection": nil, "modalities": []string{"text"}})
			big, err := json.Marshal(map[string]any{"type": "session.update", "session": map[string]any{"instructions": strings.Repeat("a", 20<<20)}})
			require.NoError(t, err)
			require.NoError(t, c.ws.Write(c.ctx, websocket.MessageText, big))
			require.Equal(t, "event_too_large", c.nextError(t, time.Minute)["code"])
			c.requireStillServes(t)
			requireServes(t, s)
		})

		t.Run("frame far over the limit closes with 1009", func(t *testing.T) {
			t.Parallel()
			c := dialRT(t, s, map[string]any{"turn_detection": nil, "modalities": []string{"text"}})
			huge := make([]byte, 70<<20)
			_ = c.ws.Write(c.ctx, websocket.MessageText, huge) // the server may close before it is all sent
			c.waitEnd(t, time.Minute)
			require.Equal(t, websocket.StatusMessageTooBig, websocket.CloseStatus(c.readErr), "%v", c.readErr)
			requireServes(t, s)
		})

		t.Run("response.create while active", func(t *testing.T) {
			t.Parallel()
			c := dialRT(t, s, map[string]any{"turn_detection": nil, "max_response_output_tokens": 200})
			c.send(t, textItem("tell me a long story"))
			// Back to back: events are processed in order, so the second finds the first active.
			c.send(t, map[string]any{"type": "response.create"})
			c.send(t, map[string]any{"type": "response.create", "event_id": "evt_second"})
			c.until(t, "response.created", time.Minute)
			e := c.nextError(t, time.Minute)
			// vllm-omni's code on ?duplex=1 (OpenAI's conversation_already_has_active_response).
			require.Equal(t, "response_already_active", e["code"], "%v", e)
			require.Equal(t, "evt_second", e["event_id"])
			c.send(t, map[string]any{"type": "response.cancel"})
			seen := c.collectUntil(t, "response.done", time.Minute)
			for _, ev := range seen {
				require.NotEqual(t, "response.created", ev["type"], "the refused response.create started nothing")
			}
			c.requireStillServes(t)
			requireServes(t, s)
		})

		t.Run("client that stops reading is closed", func(t *testing.T) {
			t.Parallel()
			ws, sid := dialStuckReader(t, s)
			// One update sets ~6 KB of instructions (what fits the model's context); then each
			// empty update is echoed with the whole session, 6 KB for 40 bytes. Nobody reads the
			// echoes: the socket buffers (the client's kept small) fill and the server's write
			// blocks, or its queue overflows. The client's updates are small so that the server
			// takes them all at once: with 6 KB updates, up to 32 MiB of them waited in the
			// server's receive buffer, and how soon the server's output backed up depended on how
			// fast a loaded machine worked through them (a 20 s window was once missed).
			big := strings.Repeat("You are a helpful assistant. ", 150)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			b, err := json.Marshal(map[string]any{"type": "session.update", "session": map[string]any{"instructions": big}})
			require.NoError(t, err)
			require.NoError(t, ws.Write(ctx, websocket.MessageText, b))
			var lastWrite time.Time
			for range 3000 {
				if ws.Write(ctx, websocket.MessageText, []byte(`{"type":"session.update","session":{}}`)) != nil {
					break // the server already gave up on us
				}
				lastWrite = time.Now()
			}
			// Closed by whichever bound trips first: a write blocked past the write timeout, or
			// the outbound queue full (its event count or bytes); both close with 1008 and log.
			lines := []string{
				fmt.Sprintf(`"msg":"realtime client is not reading; closing the connection (1008)","session_id":"%s"`, sid),
				fmt.Sprintf(`"msg":"outbound queue refused an event; closing","session_id":"%s"`, sid),
			}
			require.Eventually(t, func() bool {
				logs := s.logs.String()
				return strings.Contains(logs, lines[0]) || strings.Contains(logs, lines[1])
			}, maxIdle, 50*time.Millisecond, "the slow client is closed (1008) and logged within the write timeout, before any idle timeout: %s",
				grepLines(s.logs.String(), sid))
			t.Logf("slow client closed %v after its last write", time.Since(lastWrite).Round(time.Millisecond))
			// Reading now drains what was buffered and what was in flight, then the close frame
			// says why: a client that was only paused learns it was too slow.
			for err == nil {
				_, _, err = ws.Read(ctx)
			}
			require.NoError(t, ctx.Err(), "the connection ended")
			require.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(err), "the close frame reached the client: %v", err)
			var ce websocket.CloseError
			require.ErrorAs(t, err, &ce)
			require.Contains(t, ce.Reason, "too slow")
			t.Logf("the stuck client then read: %v", err)
			requireServes(t, s)
		})

		t.Run("chat body at 1 byte per second is cut", func(t *testing.T) {
			t.Parallel()
			conn, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", s.addr)
			require.NoError(t, err)
			defer conn.Close()
			_, err = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: omniserve\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			writer := make(chan error, 1)
			go func() { // 1 byte/s until the server gives up
				for {
					select {
					case <-ctx.Done():
						writer <- ctx.Err()
						return
					case <-time.After(time.Second):
					}
					if _, err := conn.Write([]byte(" ")); err != nil {
						writer <- err
						return
					}
				}
			}()
			start := time.Now()
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(2*time.Minute)))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err == nil {
				resp.Body.Close()
				require.Equal(t, http.StatusBadRequest, resp.StatusCode)
			} else {
				var ne net.Error
				require.False(t, errors.As(err, &ne) && ne.Timeout(), "the server never cut the body: %v", err)
			}
			t.Logf("the trickling body was cut after %v (%v)", time.Since(start).Round(time.Millisecond), err)
			cancel()
			<-writer
			requireServes(t, s)
		})

		t.Run("chat Content-Type text/plain is 415", func(t *testing.T) {
			t.Parallel()
			resp, err := http.Post("http://"+s.addr+"/v1/chat/completions", "text/plain", //nolint:noctx // bounded by the server under test
				strings.NewReader(`{"model":"dummy:tiny","messages":[{"role":"user","content":"hi"}]}`))
			require.NoError(t, err)
			requireChatError(t, resp, http.StatusUnsupportedMediaType, "", "unsupported_media_type")
			requireServes(t, s)
		})
	})

	code, metrics := s.get(t, "/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(metrics), `model_name="dummy:tiny"`, "the label is the model id")
	require.NotContains(t, string(metrics), ".gguf", "never the model's path")
	require.NotContains(t, string(metrics), cache)
	requireServes(t, s)
}

// requireServes proves the server still serves: a new realtime session answers a text turn and
// a chat request completes.
func requireServes(t *testing.T, s *binServer) {
	t.Helper()
	c := dialRT(t, s, map[string]any{"turn_detection": nil, "modalities": []string{"text"}, "max_response_output_tokens": 4})
	c.requireStillServes(t)
	c.close(t)
	resp, err := http.Post("http://"+s.addr+"/v1/chat/completions", "application/json", //nolint:noctx // bounded by the server under test
		strings.NewReader(`{"model":"dummy:tiny","messages":[{"role":"user","content":"hello"}],"max_tokens":3}`))
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Contains(t, string(b), `"chat.completion"`)
}

// requireStillServes proves the session survived: a text turn gets its item and its response.
// Errors fail it.
func (c *rtClient) requireStillServes(t *testing.T) {
	t.Helper()
	c.send(t, textItem("hello"))
	c.until(t, "conversation.item.added", time.Minute)
	c.send(t, map[string]any{"type": "response.create", "response": map[string]any{"output_modalities": []string{"text"}, "max_output_tokens": 4}})
	require.Contains(t, []string{"completed", "incomplete"}, status(c.until(t, "response.done", 2*time.Minute)))
}

func textItem(text string) map[string]any {
	return map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
		"content": []map[string]any{{"type": "input_text", "text": text}}}}
}

// update sends a session.update and returns the session of its session.updated.
func (c *rtClient) update(t *testing.T, session map[string]any) map[string]any {
	t.Helper()
	c.send(t, map[string]any{"type": "session.update", "session": session})
	got, ok := c.until(t, "session.updated", 30*time.Second)["session"].(map[string]any)
	require.True(t, ok)
	return got
}

// nextError returns the error object of the next error event, skipping other events.
func (c *rtClient) nextError(t *testing.T, timeout time.Duration) map[string]any {
	t.Helper()
	e, ok := c.untilType(t, "error", timeout)["error"].(map[string]any)
	require.True(t, ok)
	return e
}

// collectUntil returns every event up to and including the next one of type typ.
func (c *rtClient) collectUntil(t *testing.T, typ string, timeout time.Duration) []map[string]any {
	t.Helper()
	var seen []map[string]any
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-c.events:
			require.True(t, ok, "connection ended while waiting for %s", typ)
			seen = append(seen, ev.m)
			if ev.m["type"] == typ {
				return seen
			}
		case <-deadline:
			t.Fatalf("no %s within %s", typ, timeout)
		}
	}
}

// waitEnd waits until the server has ended the connection (the reader saw its error).
func (c *rtClient) waitEnd(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case _, ok := <-c.events:
			if !ok {
				<-c.done
				return
			}
		case <-deadline:
			t.Fatalf("the connection did not end within %s", timeout)
		}
	}
}

// dialStuckReader opens a session whose client reads session.created and then nothing more,
// through a small receive buffer (no autotuning), so that a few MiB fill the path.
func dialStuckReader(t *testing.T, s *binServer) (*websocket.Conn, string) {
	t.Helper()
	d := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 32<<10)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+s.addr+"/v1/realtime?duplex=1", &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}}) //nolint:bodyclose // coder/websocket closes it
	require.NoError(t, err)
	t.Cleanup(func() { _ = ws.CloseNow() })
	ws.SetReadLimit(64 << 20)
	_, b, err := ws.Read(ctx)
	require.NoError(t, err)
	var created struct {
		Type    string `json:"type"`
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
	}
	require.NoError(t, json.Unmarshal(b, &created))
	require.Equal(t, "session.created", created.Type)
	require.NotEmpty(t, created.Session.ID)
	return ws, created.Session.ID
}

// grepLines returns the lines of text that contain sub.
func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
