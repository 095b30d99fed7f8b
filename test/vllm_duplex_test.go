package test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
)

// ackClient is a client as vllm-omni's DuplexClient behaves on the wire: every server event
// with a server_event_seq is acknowledged (session.event_ack) as soon as it is read, errors
// included. It counts the frames both ways.
type ackClient struct {
	ws      *websocket.Conn
	ctx     context.Context
	events  chan map[string]any
	done    chan struct{}
	in, out atomic.Int64
	readErr error
	mu      sync.Mutex
	all     []map[string]any // every event read, in order
}

func dialAck(t *testing.T, url string) *ackClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	ws, _, err := websocket.Dial(ctx, url, nil) //nolint:bodyclose // coder/websocket closes it
	require.NoError(t, err)
	ws.SetReadLimit(64 << 20)
	c := &ackClient{ws: ws, ctx: ctx, events: make(chan map[string]any, 8192), done: make(chan struct{})}
	go c.read()
	t.Cleanup(func() {
		_ = ws.CloseNow()
		<-c.done
		cancel()
	})
	return c
}

func (c *ackClient) read() {
	defer close(c.done)
	defer close(c.events)
	for {
		_, b, err := c.ws.Read(c.ctx)
		if err != nil {
			c.readErr = err
			return
		}
		c.in.Add(1)
		var m map[string]any
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		if seq, ok := m["server_event_seq"].(float64); ok {
			ack, _ := json.Marshal(map[string]any{"type": "session.event_ack", "server_event_seq": int64(seq)})
			if c.ws.Write(c.ctx, websocket.MessageText, ack) == nil {
				c.out.Add(1)
			}
		}
		c.mu.Lock()
		c.all = append(c.all, m)
		c.mu.Unlock()
		select {
		case c.events <- m:
		default:
		}
	}
}

func (c *ackClient) send(t *testing.T, ev map[string]any) {
	t.Helper()
	b, err := json.Marshal(ev)
	require.NoError(t, err)
	require.NoError(t, c.ws.Write(c.ctx, websocket.MessageText, b))
	c.out.Add(1)
}

// until returns the next event of type typ; an error event before it fails the test.
func (c *ackClient) until(t *testing.T, typ string, timeout time.Duration) map[string]any {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok { // closed after readErr was set: reading it now is no race
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

// frames is the number of frames exchanged so far, both ways.
func (c *ackClient) frames() int64 { return c.in.Load() + c.out.Load() }

// typesSeen counts the events read so far by type.
func (c *ackClient) typesSeen() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := map[string]int{}
	for _, m := range c.all {
		typ, _ := m["type"].(string)
		n[typ]++
	}
	return n
}

// metricLabeled is the value of the series of name whose labels include every one of labels
// (`k="v"` each), summed over the others; 0 when there is none.
func metricLabeled(t *testing.T, s *binServer, name string, labels ...string) float64 {
	t.Helper()
	code, body := s.get(t, "/metrics")
	require.Equal(t, 200, code)
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		set, _, _ := strings.Cut(rest, "}")
		match := true
		for _, l := range labels {
			match = match && strings.Contains(","+set+",", ","+l+",")
		}
		if !match {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		require.NoError(t, err, line)
		sum += v
	}
	return sum
}

// An idle duplex session whose client acknowledges every event, as vllm-omni's clients do, is
// quiet: at most 2 frames a second both ways (issue 38: 14,607 frames/s before, an ack answered
// with a numbered error that was acked in turn), and no error at all.
func TestDuplexIdleAckedSessionIsQuiet(t *testing.T) {
	t.Parallel()
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	c := dialAck(t, "ws://"+s.addr+"/v1/realtime?duplex=1")
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{
		"modalities": []string{"text", "audio"}, "turn_detection": nil, "input_audio_format": "pcm16", "output_audio_format": "pcm16"}})
	c.until(t, "session.updated", 30*time.Second)
	time.Sleep(300 * time.Millisecond) // the handshake's acks are on their way
	const idle = 5 * time.Second
	before := c.frames()
	time.Sleep(idle)
	exchanged := c.frames() - before
	rate := float64(exchanged) / idle.Seconds()
	t.Logf("idle, acking every event: %d frames in %v (%.1f/s); events seen %v", exchanged, idle, rate, c.typesSeen())
	require.LessOrEqual(t, rate, 2.0)
	require.Zero(t, c.typesSeen()["error"], "no error answers an ack")
	c.send(t, map[string]any{"type": "session.close"})
	c.until(t, "session.closed", 10*time.Second)
}

// A flood of invalid events gets a bounded number of error events (the default budget: a burst
// of 100), then session.closed {reason: too_many_invalid_events} and a 1008 close; Prometheus
// counts the invalid events by dialect and reason, and the close. The server goes on serving.
func TestRealtimeInvalidEventFloodIsClosed(t *testing.T) {
	t.Parallel()
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	tests := []struct {
		name, path, dialect string
	}{
		{"plain realtime", "/v1/realtime", "openai"},
		{"duplex", "/v1/realtime?duplex=1", "vllm_duplex"},
		{"/v1/duplex", "/v1/duplex", "vllm_duplex"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := dialAck(t, "ws://"+s.addr+tc.path)
			c.until(t, "session.created", 30*time.Second)
			unknown := metricLabeled(t, s, "omniserve_realtime_invalid_events_total", `dialect="`+tc.dialect+`"`, `reason="unknown_event"`)
			closes := metricLabeled(t, s, "omniserve_realtime_invalid_event_closes_total", `dialect="`+tc.dialect+`"`)
			for i := range 5000 {
				b, _ := json.Marshal(map[string]any{"type": "no.such.event", "event_id": "evt_" + strconv.Itoa(i)})
				if c.ws.Write(c.ctx, websocket.MessageText, b) != nil {
					break
				}
			}
			select {
			case <-c.done:
			case <-time.After(30 * time.Second):
				t.Fatal("the flooding connection was not closed")
			}
			require.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(c.readErr), "%v", c.readErr)
			seen := c.typesSeen()
			t.Logf("events seen: %v", seen)
			// The burst, and what the 10/s refill added while the flood was read.
			require.GreaterOrEqual(t, seen["error"], 100)
			require.LessOrEqual(t, seen["error"], 110, "the budget's errors, no more")
			require.Equal(t, 1, seen["session.closed"])
			c.mu.Lock()
			last := c.all[len(c.all)-1]
			c.mu.Unlock()
			require.Equal(t, "too_many_invalid_events", last["reason"], "%v", last)
			require.Greater(t, metricLabeled(t, s, "omniserve_realtime_invalid_events_total", `dialect="`+tc.dialect+`"`, `reason="unknown_event"`)-unknown, 100.0)
			require.Equal(t, 1.0, metricLabeled(t, s, "omniserve_realtime_invalid_event_closes_total", `dialect="`+tc.dialect+`"`)-closes)
			requireServes(t, s)
		})
	}
}

// startDuplexBinary is the real binary with the dummy model, for the dialect's tests.
func startDuplexBinary(t *testing.T) *binServer {
	t.Helper()
	return startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
}

// openDuplex connects to path as vllm-omni's DuplexClient does and configures the session with
// its session.update (nested; flat when flat is true), returning once it is updated.
func openDuplex(t *testing.T, s *binServer, path string, session map[string]any, flat bool) *ackClient {
	t.Helper()
	c := dialAck(t, "ws://"+s.addr+path)
	ev := map[string]any{"type": "session.update", "session": session}
	if flat {
		ev = map[string]any{"type": "session.update"}
		for k, v := range session {
			ev[k] = v
		}
	}
	c.send(t, ev)
	c.until(t, "session.updated", 30*time.Second)
	return c
}

// errorCode is the code of an error event.
func errorCode(ev map[string]any) string {
	e, _ := ev["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

// The dialect is chosen at the upgrade: ?duplex=1|true|on and /v1/duplex speak vllm-omni's
// (its error codes: input_audio_buffer_empty for an empty commit), plain /v1/realtime keeps
// OpenAI's (input_audio_buffer_commit_empty).
func TestDuplexDialectChosenAtUpgrade(t *testing.T) {
	t.Parallel()
	s := startDuplexBinary(t)
	// inputCommit is what input.commit gets on an empty buffer: vllm-omni's event, refused as
	// unknown on OpenAI's dialect.
	tests := []struct{ path, code, inputCommit string }{
		{"/v1/realtime?duplex=1", "input_audio_buffer_empty", "input_audio_buffer_empty"},
		{"/v1/realtime?duplex=true", "input_audio_buffer_empty", "input_audio_buffer_empty"},
		{"/v1/realtime?duplex=on", "input_audio_buffer_empty", "input_audio_buffer_empty"},
		{"/v1/duplex", "input_audio_buffer_empty", "input_audio_buffer_empty"},
		{"/v1/duplex?model=dummy:tiny&autostart=0", "input_audio_buffer_empty", "input_audio_buffer_empty"},
		{"/v1/realtime", "input_audio_buffer_commit_empty", "unknown_event"},
		{"/v1/realtime?duplex=0", "input_audio_buffer_commit_empty", "unknown_event"},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			c := openDuplex(t, s, tc.path, map[string]any{"turn_detection": nil, "modalities": []string{"text"}}, false)
			c.send(t, map[string]any{"type": "input_audio_buffer.commit", "event_id": "evt_empty"})
			e := c.until(t, "error", 10*time.Second)
			require.Equal(t, tc.code, errorCode(e), "%v", e)
			require.Equal(t, "evt_empty", e["error"].(map[string]any)["event_id"])
			c.send(t, map[string]any{"type": "input.commit"})
			e = c.until(t, "error", 10*time.Second)
			require.Equal(t, tc.inputCommit, errorCode(e), "%v", e)
		})
	}
}

// vllm-omni's error codes for the errors both dialects have, each provoked on ?duplex=1; a
// refused event changes nothing and the session goes on.
func TestDuplexDialectErrorCodes(t *testing.T) {
	t.Parallel()
	s := startDuplexBinary(t)
	c := openDuplex(t, s, "/v1/realtime?duplex=1", map[string]any{"turn_detection": nil, "modalities": []string{"text"}}, false)
	tests := []struct {
		name string
		ev   map[string]any
		code string
	}{
		{"empty commit", map[string]any{"type": "input_audio_buffer.commit"}, "input_audio_buffer_empty"},
		{"empty input.commit", map[string]any{"type": "input.commit"}, "input_audio_buffer_empty"},
		{"retrieve an unknown item", map[string]any{"type": "conversation.item.retrieve", "item_id": "item_nope"}, "item_not_found"},
		{"delete an unknown item", map[string]any{"type": "conversation.item.delete", "item_id": "item_nope"}, "item_not_found"},
		{"truncate an unknown item", map[string]any{"type": "conversation.item.truncate", "item_id": "item_nope", "content_index": 0, "audio_end_ms": 10}, "item_not_found"},
		{"cancel with no response", map[string]any{"type": "response.cancel"}, "response_not_active"},
		{"text append without text", map[string]any{"type": "push_text"}, "bad_event"},
		{"append without audio", map[string]any{"type": "input_audio_buffer.append"}, "bad_event"},
		{"unknown event", map[string]any{"type": "no.such.event"}, "unknown_event"},
		{"response.create with a temperature out of range", map[string]any{"type": "response.create", "response": map[string]any{"temperature": 2.7}}, "invalid_value"},
		{"response.create with a speed (refused, named)", map[string]any{"type": "response.create", "response": map[string]any{"speed": 0.8}}, "unsupported_response_option"},
	}
	for _, tc := range tests {
		c.send(t, tc.ev)
		e := c.until(t, "error", 10*time.Second)
		require.Equal(t, tc.code, errorCode(e), "%s: %v", tc.name, e)
		c.send(t, map[string]any{"type": "session.heartbeat"})
		c.until(t, "session.heartbeat_ack", 10*time.Second)
	}
	c.send(t, map[string]any{"type": "close_session"})
	closed := c.until(t, "session.closed", 10*time.Second)
	require.Equal(t, "client_close", closed["reason"])
}

// input.text.append and input.commit, as vllm-omni's text lane uses them, on /v1/duplex with a
// flat session.update: the appends join the open input item (nothing is sent for them), the
// commit makes the joined text one user item and is answered, each event acknowledged and no
// error.
func TestDuplexTextAppendAndInputCommit(t *testing.T) {
	t.Parallel()
	s := startDuplexBinary(t)
	for _, alias := range []string{"input.text.append", "push_text", "input_text.append"} {
		t.Run(alias, func(t *testing.T) {
			c := openDuplex(t, s, "/v1/duplex", map[string]any{"turn_detection": nil, "modalities": []string{"text"},
				"max_response_output_tokens": 8, "instructions": "Be brief."}, true)
			c.send(t, map[string]any{"type": alias, "text": "hello "})
			c.send(t, map[string]any{"type": alias, "text": "there"})
			c.send(t, map[string]any{"type": "session.heartbeat"}) // a marker: nothing came before it for the appends
			require.Equal(t, "session.heartbeat_ack", c.until(t, "session.heartbeat_ack", 10*time.Second)["type"])
			require.Zero(t, c.typesSeen()["conversation.item.added"], "an append joins the open item; nothing is sent for it")
			c.send(t, map[string]any{"type": "input.commit", "final": true})
			item := c.until(t, "conversation.item.added", 10*time.Second)["item"].(map[string]any)
			require.Equal(t, "user", item["role"])
			require.Equal(t, "hello there", item["content"].([]any)[0].(map[string]any)["text"], "the appends are one item")
			done := c.until(t, "response.done", 2*time.Minute)
			require.Contains(t, []string{"completed", "incomplete"}, status(done), "%v", done)
			seen := c.typesSeen()
			require.Equal(t, 1, seen["response.created"])
			require.Equal(t, 1, seen["conversation.item.added"]-len(done["response"].(map[string]any)["output"].([]any)))
			require.Zero(t, seen["error"])

			// Text, then a clear: dropped; a commit of nothing is refused as empty.
			c.send(t, map[string]any{"type": alias, "text": "never mind"})
			c.send(t, map[string]any{"type": "input_audio_buffer.clear"})
			c.send(t, map[string]any{"type": "input.commit"})
			ev := <-c.events
			for ev["type"] != "error" {
				require.NotEqual(t, "conversation.item.added", ev["type"], "the cleared text is no item")
				ev = <-c.events
			}
			require.Equal(t, "input_audio_buffer_empty", errorCode(ev))
			c.send(t, map[string]any{"type": "close"})
			c.until(t, "session.closed", 10*time.Second)
		})
	}
}

// Audio in vllm-omni's spellings: push_chunk's WAV files (its default format) and an append
// with input_audio_format and sample_rate, each committed with input.commit, which asks for the
// response itself.
func TestDuplexAudioAliasesAndInputCommit(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(goForwardRaw)
	require.NoError(t, err, "install pocketsphinx-testdata")
	s := startDuplexBinary(t)
	wavChunk := func(pcm []byte) string {
		f := make([]float32, len(pcm)/2)
		for i := range f {
			f[i] = float32(int16(uint16(pcm[2*i])|uint16(pcm[2*i+1])<<8)) / 32768
		}
		return base64.StdEncoding.EncodeToString(audio.EncodeWAV(f, 16000))
	}
	tests := []struct {
		name  string
		chunk func(pcm []byte) map[string]any
	}{
		{"push_chunk WAV", func(pcm []byte) map[string]any {
			return map[string]any{"type": "push_chunk", "audio": wavChunk(pcm)}
		}},
		{"input_audio_format and sample_rate", func(pcm []byte) map[string]any {
			return map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(pcm),
				"input_audio_format": "pcm_s16le", "sample_rate": 16000}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := openDuplex(t, s, "/v1/realtime?duplex=1", map[string]any{"turn_detection": nil, "modalities": []string{"text"},
				"max_response_output_tokens": 8}, false)
			for i := 0; i < len(raw); i += 6400 { // 200 ms
				c.send(t, tc.chunk(raw[i:min(i+6400, len(raw))]))
			}
			c.send(t, map[string]any{"type": "input.commit"})
			c.until(t, "response.done", 2*time.Minute)
			seen := c.typesSeen()
			require.Equal(t, 1, seen["input_audio_buffer.committed"], "%v", seen)
			require.Equal(t, 1, seen["response.created"], "input.commit asks for the response itself")
			require.Zero(t, seen["error"])
		})
	}
}

// vllm-omni's DuplexClient connects with autostart=0 and opens its session with its first
// session.update, waiting for session.created: nothing comes before it, and the update's session
// is the one session.updated shows.
func TestDuplexAutostartZero(t *testing.T) {
	t.Parallel()
	s := startDuplexBinary(t)
	c := dialAck(t, "ws://"+s.addr+"/v1/realtime?duplex=1&model=dummy:tiny&autostart=0")
	time.Sleep(500 * time.Millisecond)
	require.Zero(t, c.in.Load(), "nothing before the client's first frame")
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"model": "dummy:tiny", "instructions": "Be brief.",
		"turn_detection": nil, "modalities": []string{"text"}}})
	created := c.until(t, "session.created", 30*time.Second)
	require.NotEmpty(t, created["session"].(map[string]any)["id"])
	updated := c.until(t, "session.updated", 30*time.Second)
	require.Equal(t, "Be brief.", updated["session"].(map[string]any)["instructions"])
	require.Equal(t, 1, c.typesSeen()["session.created"])
}

// vllm-omni's DuplexClient resumes on the URL it first connected to: after a TCP cut it
// reconnects there (autostart=0) and sends session.resume as its first frame, with the token of
// session.created and the last server_event_seq it received. The session goes on (its numbering
// too); the old token is spent; an unknown session is session_resume_expired, which stops the
// client's retries.
func TestDuplexResumeOnTheSameURL(t *testing.T) {
	t.Parallel()
	s := startDuplexBinary(t)
	url := "ws://" + s.addr + "/v1/realtime?duplex=1&model=dummy:tiny&autostart=0"
	c := dialAck(t, url)
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"turn_detection": nil, "modalities": []string{"text"}}})
	created := c.until(t, "session.created", 30*time.Second)
	id, _ := created["session"].(map[string]any)["id"].(string)
	token, _ := created["resume_token"].(string)
	require.NotEmpty(t, id)
	require.NotEmpty(t, token, "sessions are resumable by default")
	updated := c.until(t, "session.updated", 30*time.Second)
	last := int64(updated["server_event_seq"].(float64))
	require.NoError(t, c.ws.CloseNow()) // a cut, no close frame: the session waits for its client
	<-c.done

	r := dialAck(t, url)
	r.send(t, map[string]any{"type": "session.resume", "session_id": id, "resume_token": token, "incarnation": 0,
		"last_received_server_event_seq": last})
	resumed := r.until(t, "session.resumed", 30*time.Second)
	require.Equal(t, id, resumed["session_id"])
	require.NotEqual(t, token, resumed["resume_token"], "each resume rotates the token")
	require.EqualValues(t, 2, resumed["attachment_generation"], "+1 per resume")
	_, numbered := resumed["server_event_seq"]
	require.False(t, numbered, "session.resumed is no part of the numbered stream")
	r.send(t, map[string]any{"type": "session.heartbeat"})
	ack := r.until(t, "session.heartbeat_ack", 10*time.Second)
	require.Equal(t, float64(last+1), ack["server_event_seq"], "the numbering goes on, nothing lost or repeated")

	// A resume while r is live moves the session again: r is told, and closed.
	r2 := dialAck(t, url)
	r2.send(t, map[string]any{"type": "session.resume", "session_id": id, "resume_token": resumed["resume_token"],
		"last_received_server_event_seq": last + 1})
	r2.until(t, "session.resumed", 30*time.Second)
	replaced := r.until(t, "session.replaced", 10*time.Second)
	require.Equal(t, id, replaced["session_id"])
	require.Equal(t, 2.0, replaced["attachment_generation"], "r was the session's second connection")
	<-r.done
	require.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(r.readErr))
	r = r2

	stale := dialAck(t, url)
	stale.send(t, map[string]any{"type": "session.resume", "session_id": id, "resume_token": token, "last_received_server_event_seq": last})
	e := stale.until(t, "error", 10*time.Second)
	require.Equal(t, "invalid_resume_token", errorCode(e), "%v", e)

	gone := dialAck(t, url)
	gone.send(t, map[string]any{"type": "session.resume", "session_id": "duplex-nope", "resume_token": "rt_nope", "last_received_server_event_seq": 0})
	e = gone.until(t, "error", 10*time.Second)
	require.Equal(t, "session_resume_expired", errorCode(e), "%v", e)
	r.send(t, map[string]any{"type": "session.close"})
	r.until(t, "session.closed", 10*time.Second)
}

// A resume whose cursor the journal no longer covers gets vllm-omni's answer on its dialect:
// session.resync_required {session_id, reason: "journal_gap"}, unnumbered, and close 1008 (its
// clients stop retrying on it), not session.resumed with OpenAI's resync flag.
func TestDuplexResumeJournalGap(t *testing.T) {
	t.Parallel()
	s := startBinaryEnv(t, []string{"OMNISERVE_RESUME_JOURNAL_EVENTS=16"}, "--config", "configs/omni-cpu.yaml",
		"--model", "dummy:tiny", "--cache-dir", filepath.Join(t.TempDir(), "cache"))
	url := "ws://" + s.addr + "/v1/realtime?duplex=1&model=dummy:tiny&autostart=0"
	c := dialAck(t, url)
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"turn_detection": nil, "modalities": []string{"text"}}})
	created := c.until(t, "session.created", 30*time.Second)
	id, _ := created["session"].(map[string]any)["id"].(string)
	token, _ := created["resume_token"].(string)
	c.until(t, "session.updated", 30*time.Second)
	for range 20 { // more numbered events than the journal keeps
		c.send(t, map[string]any{"type": "session.heartbeat"})
	}
	for range 20 {
		c.until(t, "session.heartbeat_ack", 10*time.Second)
	}
	require.NoError(t, c.ws.CloseNow())
	<-c.done

	r := dialAck(t, url)
	r.send(t, map[string]any{"type": "session.resume", "session_id": id, "resume_token": token, "incarnation": 0,
		"last_received_server_event_seq": 1})
	ev := r.until(t, "session.resync_required", 30*time.Second)
	require.Equal(t, id, ev["session_id"])
	require.Equal(t, "journal_gap", ev["reason"])
	_, numbered := ev["server_event_seq"]
	require.False(t, numbered, "no part of the numbered stream")
	<-r.done
	require.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(r.readErr), "%v", r.readErr)
	require.Empty(t, r.seen("session.resumed"))
}

// A session that stays idle for its idle_timeout_s ends as vllm-omni's lease ends it:
// session.expired {session_id, reason: "idle_ttl_expired"} as its last event, then the
// connection closes; no session.closed. Its resume token is then refused as expired (vllm-omni's
// clients stop on session_resume_expired). Acks are no activity: a client that only acks idles.
func TestDuplexIdleSessionExpires(t *testing.T) {
	t.Parallel()
	s := startDuplexBinary(t)
	url := "ws://" + s.addr + "/v1/realtime?duplex=1&model=dummy:tiny&autostart=0"
	c := dialAck(t, url)
	start := time.Now()
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"turn_detection": nil,
		"modalities": []string{"text"}, "idle_timeout_s": 1}})
	created := c.until(t, "session.created", 30*time.Second)
	id := created["session"].(map[string]any)["id"].(string)
	token := created["resume_token"].(string)
	expired := c.until(t, "session.expired", 10*time.Second)
	require.GreaterOrEqual(t, time.Since(start), time.Second)
	require.Equal(t, id, expired["session_id"])
	require.Equal(t, "idle_ttl_expired", expired["reason"])
	require.NotNil(t, expired["server_event_seq"], "numbered, as every session event")
	for range c.events { // the connection ends after it
	}
	require.Zero(t, c.typesSeen()["session.closed"], "session.expired is the last event")

	r := dialAck(t, url)
	r.send(t, map[string]any{"type": "session.resume", "session_id": id, "resume_token": token, "last_received_server_event_seq": 0})
	e := r.until(t, "error", 10*time.Second)
	require.Equal(t, "session_resume_expired", errorCode(e), "%v", e)

	// Text appended to the open input item is activity, as vllm-omni counts it, though nothing
	// reaches the conversation before its commit.
	a := dialAck(t, url)
	a.send(t, map[string]any{"type": "session.update", "session": map[string]any{"turn_detection": nil,
		"modalities": []string{"text"}, "idle_timeout_s": 1}})
	a.until(t, "session.created", 30*time.Second)
	for range 6 {
		time.Sleep(400 * time.Millisecond)
		a.send(t, map[string]any{"type": "input.text.append", "text": "still here "})
	}
	require.Zero(t, a.typesSeen()["session.expired"], "2.4 s of appends, none more than 1 s apart")
	a.until(t, "session.expired", 10*time.Second)
}
