package test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// recvKey is where liveClient notes when it read an event (not a wire field).
const recvKey = "_received"

// liveClient is a raw GPT-Live client over the real WebSocket: it records every event it reads.
type liveClient struct {
	ws      *websocket.Conn
	ctx     context.Context
	events  chan map[string]any
	done    chan struct{}
	readErr error
	mu      sync.Mutex
	all     []map[string]any
}

func dialLive(t *testing.T, s *binServer, header http.Header) *liveClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	ws, _, err := websocket.Dial(ctx, "ws://"+s.addr+"/v1/live/sessions", &websocket.DialOptions{HTTPHeader: header}) //nolint:bodyclose // coder/websocket closes it
	require.NoError(t, err)
	ws.SetReadLimit(64 << 20)
	c := &liveClient{ws: ws, ctx: ctx, events: make(chan map[string]any, 1<<14), done: make(chan struct{})}
	go c.read()
	t.Cleanup(func() {
		_ = ws.CloseNow()
		<-c.done
		cancel()
	})
	return c
}

func (c *liveClient) read() {
	defer close(c.done)
	defer close(c.events)
	for {
		_, b, err := c.ws.Read(c.ctx)
		if err != nil {
			c.readErr = err
			return
		}
		var m map[string]any
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		m[recvKey] = time.Now()
		c.mu.Lock()
		c.all = append(c.all, m)
		c.mu.Unlock()
		select {
		case c.events <- m:
		default:
		}
	}
}

func (c *liveClient) send(t *testing.T, ev map[string]any) {
	t.Helper()
	b, err := json.Marshal(ev)
	require.NoError(t, err)
	require.NoError(t, c.ws.Write(c.ctx, websocket.MessageText, b))
}

// next is the next event that is not an audio or transcript delta.
func (c *liveClient) next(t *testing.T, timeout time.Duration) map[string]any {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				t.Fatalf("the connection ended: %v", c.readErr)
			}
			if typ, _ := ev["type"].(string); strings.HasSuffix(typ, ".delta") {
				continue
			}
			return ev
		case <-deadline:
			t.Fatalf("no event within %v", timeout)
		}
	}
}

// until is the next event of type typ; an error before it fails the test.
func (c *liveClient) until(t *testing.T, typ string, timeout time.Duration) map[string]any {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				t.Fatalf("the connection ended while waiting for %s: %v", typ, c.readErr)
			}
			if ev["type"] == typ {
				return ev
			}
			require.NotEqual(t, "error", ev["type"], "waiting for %s: %v", typ, ev["error"])
		case <-deadline:
			t.Fatalf("no %s within %s", typ, timeout)
		}
	}
}

// count is how many events of typ were read so far.
func (c *liveClient) count(typ string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.all {
		if m["type"] == typ {
			n++
		}
	}
	return n
}

// liveError asserts ev is a Live-shaped error with code and param, echoing clientEventID.
func liveError(t *testing.T, ev map[string]any, code, param, clientEventID string) {
	t.Helper()
	require.Equal(t, "error", ev["type"], "%v", ev)
	require.NotEmpty(t, ev["event_id"], "%v", ev)
	e, ok := ev["error"].(map[string]any)
	require.True(t, ok, "%v", ev)
	require.Equal(t, code, e["code"], "%v", ev)
	require.NotEmpty(t, e["type"], "%v", ev)
	require.NotEmpty(t, e["message"], "%v", ev)
	if param == "" {
		require.NotContains(t, e, "param", "%v", ev)
	} else {
		require.Equal(t, param, e["param"], "%v", ev)
	}
	if clientEventID != "" {
		require.Equal(t, clientEventID, e["client_event_id"], "%v", ev)
	}
}

func startLiveBinary(t *testing.T, args ...string) *binServer {
	t.Helper()
	return startBinary(t, append([]string{"--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache")}, args...)...)
}

func quickStartSession() map[string]any {
	return map[string]any{
		"model":        "gpt-live-1",
		"instructions": "Be concise. Delegate tasks that need current information.",
		"audio":        map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 24000}, "output": map[string]any{"voice": "marin"}},
		"delegation":   map[string]any{"type": "responses", "responses": map[string]any{"model": "gpt-5.6-luna", "tools": []any{map[string]any{"type": "web_search"}}}},
	}
}

// Bad input, each case on one live session: a Live-shaped error naming the parameter and the
// client's event, and the session goes on (a refused start is followed by a good one, the
// refusals after it by an append that is acknowledged).
func TestLiveBadInputGetsLiveErrors(t *testing.T) {
	t.Parallel()
	s := startLiveBinary(t)
	c := dialLive(t, s, nil)
	silence := base64.StdEncoding.EncodeToString(make([]byte, 4800)) // 100 ms at 24 kHz
	before := []struct {
		name        string
		ev          map[string]any
		code, param string
	}{
		{"audio before start", map[string]any{"type": "session.input_audio.append", "event_id": "e1", "audio": silence}, "session_not_started", ""},
		{"an append before start", map[string]any{"type": "session.thinking.append", "event_id": "e2", "content": "x", "delegation_id": nil}, "session_not_started", ""},
		{"not JSON", nil, "invalid_json", ""},
		{"unknown event", map[string]any{"type": "session.nope", "event_id": "e3"}, "invalid_value", "type"},
		{"unknown top-level field", map[string]any{"type": "session.start", "event_id": "e4", "session": quickStartSession(), "sesion": 1}, "unknown_parameter", "sesion"},
		{"unknown field", map[string]any{"type": "session.start", "event_id": "e5", "session": map[string]any{"model": "gpt-live-1", "temprature": 0.5}}, "unknown_parameter", "session.temprature"},
		{"unknown nested field", map[string]any{"type": "session.start", "event_id": "e6", "session": map[string]any{"model": "gpt-live-1", "audio": map[string]any{"output": map[string]any{"voice": "marin", "speed": 1.2}}}}, "unknown_parameter", "session.audio.output.speed"},
		{"unknown field in a list", map[string]any{"type": "session.start", "event_id": "e7", "session": map[string]any{"model": "gpt-live-1", "input": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": "hi", "lang": "en"}}}}}}, "unknown_parameter", "session.input[0].content[0].lang"},
		{"44.1 kHz", map[string]any{"type": "session.start", "event_id": "e8", "session": map[string]any{"model": "gpt-live-1", "audio": map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 44100}}}}, "invalid_value", "session.audio.format.rate"},
		{"no model", map[string]any{"type": "session.start", "event_id": "e9", "session": map[string]any{}}, "missing_required_parameter", "session.model"},
		{"a model not served", map[string]any{"type": "session.start", "event_id": "e10", "session": map[string]any{"model": "gpt-4o"}}, "model_not_found", "session.model"},
	}
	for _, tc := range before {
		if tc.ev == nil {
			require.NoError(t, c.ws.Write(c.ctx, websocket.MessageText, []byte("{not json")))
		} else {
			c.send(t, tc.ev)
		}
		id, _ := "", ""
		if tc.ev != nil {
			id, _ = tc.ev["event_id"].(string)
		}
		liveError(t, c.next(t, 20*time.Second), tc.code, tc.param, id)
	}
	// The socket stayed open: a corrected start starts the session.
	c.send(t, map[string]any{"type": "session.start", "event_id": "start", "session": quickStartSession()})
	started := c.next(t, 30*time.Second)
	require.Equal(t, "session.started", started["type"], "%v", started)
	require.Equal(t, "start", started["client_event_id"])
	res := started["session"].(map[string]any)
	require.True(t, strings.HasPrefix(res["id"].(string), "live_"), "%v", res)
	require.Equal(t, "gpt-live-1", res["model"], "the requested name is echoed")
	require.Equal(t, "active", res["status"])
	require.Greater(t, res["expires_at"].(float64), float64(time.Now().Unix()))
	require.Equal(t, []any{}, res["input"])
	require.Equal(t, map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 24000.0}, "output": map[string]any{"voice": "marin"}}, res["audio"])
	require.Equal(t, "responses", res["delegation"].(map[string]any)["type"])

	long := strings.Repeat("word ", 500) // 2,500 bytes: about 625 tokens
	after := []struct {
		name        string
		ev          map[string]any
		code, param string
	}{
		{"second start", map[string]any{"type": "session.start", "event_id": "a1", "session": quickStartSession()}, "session_already_started", ""},
		{"oversize append", map[string]any{"type": "session.instructions.append", "event_id": "a2", "content": long, "delegation_id": nil}, "string_above_max_length", "content"},
		{"append without delegation_id", map[string]any{"type": "session.thinking.append", "event_id": "a3", "content": "x"}, "missing_required_parameter", "delegation_id"},
		{"unknown delegation", map[string]any{"type": "session.commentary.append", "event_id": "a4", "content": "x", "delegation_id": "item_nope"}, "invalid_value", "delegation_id"},
		{"unknown field of an append", map[string]any{"type": "session.thinking.append", "event_id": "a5", "content": "x", "delegation_id": nil, "role": "user"}, "unknown_parameter", "role"},
		{"immutable in update", map[string]any{"type": "session.update", "event_id": "a6", "session": map[string]any{"instructions": "no"}}, "unknown_parameter", "session.instructions"},
		{"delegation type change", map[string]any{"type": "session.update", "event_id": "a7", "session": map[string]any{"delegation": map[string]any{"type": "client"}}}, "invalid_value", "session.delegation.type"},
		{"bad base64", map[string]any{"type": "session.input_audio.append", "event_id": "a8", "audio": "!!!"}, "invalid_value", "audio"},
		{"unknown event", map[string]any{"type": "response.cancel", "event_id": "a9"}, "invalid_value", "type"},
	}
	for _, tc := range after {
		c.send(t, tc.ev)
		liveError(t, c.next(t, 20*time.Second), tc.code, tc.param, tc.ev["event_id"].(string))
	}
	// Nothing else was affected: an append is acknowledged on the timeline as audio flows.
	c.send(t, map[string]any{"type": "session.thinking.append", "event_id": "ok", "content": "The user likes short answers.", "delegation_id": nil})
	for range 5 {
		c.send(t, map[string]any{"type": "session.input_audio.append", "audio": silence})
	}
	ack := c.until(t, "session.thinking.appended", 20*time.Second)
	require.Equal(t, "ok", ack["client_event_id"])
	require.Equal(t, ack["start_ms"].(float64)+200, ack["end_ms"].(float64))
	c.send(t, map[string]any{"type": "session.close", "event_id": "bye"})
	closed := c.until(t, "session.closed", 20*time.Second)
	require.Equal(t, "close_requested", closed["reason"])
	require.InDelta(t, 0.5, closed["usage"].(map[string]any)["seconds"], 0.001)
	<-c.done
	require.Equal(t, websocket.StatusNormalClosure, websocket.CloseStatus(c.readErr), "%v", c.readErr)
	requireServes(t, s)
}

// The live endpoint takes the server's API key like the others: 401 before the upgrade.
func TestLiveRequiresTheAPIKey(t *testing.T) {
	t.Parallel()
	s := startLiveBinary(t, "--api-key", "sekret")
	resp, err := http.Get("http://" + s.addr + "/v1/live/sessions") //nolint:noctx // bounded by the server under test
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	c := dialLive(t, s, http.Header{"Authorization": []string{"Bearer sekret"}})
	c.send(t, map[string]any{"type": "session.start", "session": map[string]any{"model": "gpt-live-1"}})
	started := c.until(t, "session.started", 30*time.Second)
	res := started["session"].(map[string]any)
	require.Equal(t, map[string]any{"type": "client", "acknowledgement_delay_ms": 0.0}, res["delegation"], "the default delegation is resolved")
}

// wsWrite sends ev, for goroutines that must not fail the test themselves.
func (c *liveClient) wsWrite(ev map[string]any) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return c.ws.Write(c.ctx, websocket.MessageText, b)
}

// dump logs what the session sent: every event but the audio deltas, whose runs are summed
// (for a failing test's log).
func (c *liveClient) dump(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var runStart, runLast time.Time
	var frames int
	flush := func() {
		if frames > 0 {
			t.Logf("  audio: %d deltas %s .. %s", frames, runStart.Format("15:04:05.000"), runLast.Format("15:04:05.000"))
		}
		frames = 0
	}
	for _, m := range c.all {
		at := m[recvKey].(time.Time)
		if m["type"] == "session.output_audio.delta" {
			if frames == 0 || at.Sub(runLast) > 300*time.Millisecond {
				flush()
				runStart = at
			}
			runLast = at
			frames++
			continue
		}
		flush()
		ev := map[string]any{}
		for k, v := range m {
			if k != recvKey && k != "event_id" && k != "session" {
				ev[k] = v
			}
		}
		t.Logf("%s %v", at.Format("15:04:05.000"), ev)
	}
	flush()
}

// A socket that never sends session.start does not hold a slot: after the handshake timeout
// the session ends, having sent nothing (a passive socket receives nothing).
func TestLiveStartDeadline(t *testing.T) {
	t.Parallel()
	s := startBinaryEnv(t, []string{"OMNISERVE_HANDSHAKE_TIMEOUT=1s"}, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	c := dialLive(t, s, nil)
	c.send(t, map[string]any{"type": "session.input_audio.append", "event_id": "early", "audio": ""})
	liveError(t, c.next(t, 10*time.Second), "session_not_started", "", "early")
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		t.Fatal("a socket that never started was kept")
	}
	require.Equal(t, 1, len(c.all), "nothing but the error it asked for: %v", c.all)
	// A started session has the server's idle timeout instead: it outlives the deadline.
	d := dialLive(t, s, nil)
	d.send(t, map[string]any{"type": "session.start", "session": map[string]any{"model": "gpt-live-1"}})
	d.until(t, "session.started", 30*time.Second)
	time.Sleep(2 * time.Second)
	d.send(t, map[string]any{"type": "session.update", "event_id": "u", "session": map[string]any{}})
	require.Equal(t, "u", d.until(t, "session.updated", 10*time.Second)["client_event_id"])
}
