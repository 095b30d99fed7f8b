package test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 40's engine-input attacks: inputs that are not bounded by the context window bought
// seconds to minutes of prefill CPU (a 1 MiB function_call_output 55 s, a 4 MB user text item
// 148 s, 2,000 declared tools 40 s per response). Each is measured in tokens at admission now
// and refused before anything is queued for the engine (docs/SECURITY.md).

// admissionFiller is n bytes of plain English words.
func admissionFiller(n int) string {
	const words = "the quick brown fox jumps over the lazy dog while the cat sleeps on a warm mat "
	return strings.Repeat(words, n/len(words)+1)[:n]
}

// admissionTools is n function tool declarations of about 140 bytes each.
func admissionTools(n int) []any {
	tools := make([]any, n)
	for i := range tools {
		tools[i] = map[string]any{"type": "function", "name": fmt.Sprintf("lookup_%05d", i), "description": "Looks up the weather in a city.",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}
	}
	return tools
}

// admissionAttack is one attack: events a client sends before its response.create, and the
// error the first refused one gets. setup, sent once before the clock starts, is what the attack
// needs and any client sends (the call a function_call_output answers; it opens the session's
// engine stream, which costs the same for every session).
type admissionAttack struct {
	name        string
	setup       []map[string]any
	events      func() []map[string]any
	code, param string
}

func admissionAttacks() []admissionAttack {
	call := []map[string]any{{"type": "conversation.item.create", "item": map[string]any{"type": "function_call", "call_id": "call_big", "name": "lookup", "arguments": "{}"}}}
	output := func(n int) func() []map[string]any {
		return func() []map[string]any {
			return []map[string]any{{"type": "conversation.item.create", "event_id": "ev_attack", "item": map[string]any{"type": "function_call_output", "call_id": "call_big", "output": admissionFiller(n)}}}
		}
	}
	tools := func(n int) func() []map[string]any {
		return func() []map[string]any {
			return []map[string]any{{"type": "session.update", "event_id": "ev_attack", "session": map[string]any{"tools": admissionTools(n), "tool_choice": "auto"}}}
		}
	}
	text := func(n int) func() []map[string]any {
		return func() []map[string]any {
			ev := textItem(admissionFiller(n))
			ev["event_id"] = "ev_attack"
			return []map[string]any{ev}
		}
	}
	return []admissionAttack{
		{"function_call_output 1 MiB", call, output(1 << 20), "string_above_max_length", "item.output"},
		{"function_call_output 10 MiB", call, output(10 << 20), "string_above_max_length", "item.output"},
		{"2,000 tools", nil, tools(2000), "context_length_exceeded", "session.tools"},
		{"20,000 tools", nil, tools(20000), "context_length_exceeded", "session.tools"},
		{"user text 200 KB", nil, text(200 << 10), "string_above_max_length", "item.content[0].text"},
		{"user text 4 MB", nil, text(4 << 20), "string_above_max_length", "item.content[0].text"},
		{"30 items of 190 KB", nil, items(30, 190<<10), "string_above_max_length", "item.content[0].text"},
		// Under the byte bound, over the window's room (about 6,400 tokens on dummy:tiny's
		// 2,048-token window): counted, refused by its tokens.
		{"user text 20 KB", nil, text(20 << 10), "context_length_exceeded", "item.content[0].text"},
		// Each fits (about 640 tokens); together they pass the session's prefill budget (the
		// window's room: 1,792 tokens) at the third.
		{"10 items of 2 KB", nil, items(10, 2<<10), "context_length_exceeded", "item.content[0].text"},
	}
}

// items is n user text items of size bytes each.
func items(n, size int) func() []map[string]any {
	return func() []map[string]any {
		evs := make([]map[string]any, n)
		for i := range evs {
			evs[i] = textItem(admissionFiller(size))
			evs[i]["event_id"] = "ev_attack"
		}
		return evs
	}
}

// attackOutcome is what one attack got: its first error and when, when its response ended, and
// the server's CPU over the attack and in the second after it.
type attackOutcome struct {
	err           map[string]any
	errAt, doneAt time.Duration
	done          bool
	cpu, after    time.Duration
}

// runAttack sends a's events and a small response.create on c and waits (at most limit) for the
// response's end or its refusal.
func runAttack(t *testing.T, c *rtClient, pid int, a admissionAttack, limit time.Duration) attackOutcome {
	t.Helper()
	var o attackOutcome
	// Encoded first: the clock measures the server, not the client's JSON encoder.
	var frames [][]byte
	for _, ev := range append(a.events(), map[string]any{"type": "response.create", "event_id": "ev_resp", "response": map[string]any{"max_output_tokens": 4}}) {
		b, err := json.Marshal(ev)
		require.NoError(t, err)
		frames = append(frames, b)
	}
	cpu0, start := procCPU(t, pid), time.Now()
	for _, b := range frames {
		require.NoError(t, c.ws.Write(c.ctx, websocket.MessageText, b))
	}
	deadline := time.After(limit)
wait:
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				break wait
			}
			switch ev.m["type"] {
			case "error":
				e, _ := ev.m["error"].(map[string]any)
				if o.err == nil {
					o.err, o.errAt = e, ev.at.Sub(start)
				}
				if e["event_id"] == "ev_resp" {
					o.done, o.doneAt = true, ev.at.Sub(start)
					break wait
				}
			case "response.done":
				o.done, o.doneAt = true, ev.at.Sub(start)
				break wait
			}
		case <-deadline:
			break wait
		}
	}
	o.cpu = procCPU(t, pid) - cpu0
	time.Sleep(time.Second)
	o.after = procCPU(t, pid) - cpu0 - o.cpu
	return o
}

// firstAudio runs one audio turn on c and returns the time from its response.create to its
// first audio delta.
func firstAudio(t *testing.T, c *rtClient) time.Duration {
	t.Helper()
	c.send(t, textItem("hello there, how are you today"))
	c.until(t, "conversation.item.added", 30*time.Second)
	start := time.Now()
	c.send(t, map[string]any{"type": "response.create", "response": map[string]any{"max_output_tokens": 12}})
	var first time.Duration
	for first == 0 {
		select {
		case ev, ok := <-c.events:
			require.True(t, ok, "the connection ended before the first audio")
			switch ev.m["type"] {
			case "response.output_audio.delta", "response.audio.delta":
				first = ev.at.Sub(start)
			case "error", "response.done":
				t.Fatalf("no audio: %v", ev.m)
			}
		case <-time.After(time.Minute):
			t.Fatal("no first audio within a minute")
		}
	}
	c.until(t, "response.done", time.Minute)
	return first
}

// TestAdmission replays issue 40's engine-input attacks against a real bin/omniserve on the
// realtime WebSocket: each gets its error (naming the parameter) in under a second of wall time
// and of server CPU, nothing of it is prefilled, the session goes on, and another session's
// first audio while it runs stays within 20 % of an idle run's.
func TestAdmission(t *testing.T) {
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	pid := s.cmd.Process.Pid
	waitWarm(t, s)
	textSession := func() map[string]any {
		return map[string]any{"turn_detection": nil, "modalities": []string{"text"}}
	}
	victim := dialRTAt(t, s, "/v1/realtime", map[string]any{"turn_detection": nil}, 10*time.Minute)
	var idle []time.Duration
	for range 3 {
		idle = append(idle, firstAudio(t, victim))
	}
	t.Logf("idle first audio: %v", idle)

	for _, a := range admissionAttacks() {
		t.Run(a.name, func(t *testing.T) {
			c := dialRTAt(t, s, "/v1/realtime", textSession(), 5*time.Minute)
			defer c.close(t)
			for _, ev := range a.setup {
				c.send(t, ev)
				c.until(t, "conversation.item.done", 30*time.Second)
			}
			o := runAttack(t, c, pid, a, time.Minute)
			t.Logf("%s: first error %v after %v; response ended %v after %v; server CPU %v over the attack, %v in the second after",
				a.name, o.err, o.errAt.Round(time.Millisecond), o.done, o.doneAt.Round(time.Millisecond), o.cpu, o.after)
			require.NotNil(t, o.err, "no error")
			assert.Equal(t, a.code, o.err["code"], "%v", o.err)
			assert.Equal(t, a.param, o.err["param"], "%v", o.err)
			assert.Equal(t, "ev_attack", o.err["event_id"], "%v", o.err)
			assert.Less(t, o.errAt, time.Second, "time to the error")
			assert.True(t, o.done, "the response.create after the attack was answered")
			assert.Less(t, o.cpu, time.Second, "server CPU over the attack")
			assert.Less(t, o.after, 200*time.Millisecond, "server CPU after the attack")
			c.requireStillServes(t)

			// The attack again, three times, each with another session's turn at the same time,
			// between idle turns: the median during the attacks against the slowest idle turn
			// (the machine's own jitter is tens of ms, and the idle turns sample it).
			var during []time.Duration
			for range 3 {
				for _, ev := range a.events() {
					c.send(t, ev)
				}
				during = append(during, firstAudio(t, victim))
				idle = append(idle, firstAudio(t, victim))
			}
			sort.Slice(during, func(i, j int) bool { return during[i] < during[j] })
			t.Logf("%s: the other session's first audio %v during the attack (median %v); idle, slowest of %d: %v", a.name, during, during[1], len(idle), slices.Max(idle))
			if runtime.NumCPU() < 4 {
				// Reading a 4-10 MB event costs the server about 0.3 s of CPU (JSON decoding,
				// before admission can look at it); with fewer than 4 cores, shared with the test
				// and the other session's turn, that alone delays the turn by 20-40 %.
				t.Logf("%d CPUs: the other session's first audio is logged, not checked", runtime.NumCPU())
				return
			}
			assert.LessOrEqual(t, float64(during[1]), 1.2*float64(slices.Max(idle)), "the other session's first audio during the attack, against the slowest idle turn")
		})
	}
}

// waitWarm waits until the speech recognizer has warmed up, which it does in the background
// after start-up (about 0.5 s of CPU): CPU is measured after it.
func waitWarm(t *testing.T, s *binServer) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(s.logs.String(), "asr warm-up done") }, time.Minute, 10*time.Millisecond)
}

// cpuSamples polls the process's CPU time every 10 ms for d and returns the samples, the
// first taken at once.
func cpuSamples(t *testing.T, pid int, d time.Duration) (at []time.Duration, cpu []time.Duration) {
	t.Helper()
	start := time.Now()
	for time.Since(start) <= d {
		at, cpu = append(at, time.Since(start)), append(cpu, procCPU(t, pid))
		time.Sleep(10 * time.Millisecond)
	}
	return at, cpu
}

// burnStops is when, after the first sample, the process last used CPU faster than idle: the
// time of the first sample from which it used less than 20 ms in all the rest.
func burnStops(at, cpu []time.Duration) time.Duration {
	last := cpu[len(cpu)-1]
	for i := range cpu {
		if last-cpu[i] < 20*time.Millisecond {
			return at[i]
		}
	}
	return at[len(at)-1]
}

// TestAdmissionCancelStopsPrefill: a response.cancel, a closed connection and a dropped one each
// stop a long prefill running for the session within 100 ms: the server's CPU goes back to
// idle. The window is 16,384 tokens here so that one admitted item (about 12,000 tokens) takes
// seconds to prefill on the CPU.
func TestAdmissionCancelStopsPrefill(t *testing.T) {
	s := startBinaryEnv(t, []string{"OMNISERVE_SEQ_CONTEXT=16384", "OMNISERVE_MAX_SEQUENCES=4"},
		"--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--max-sessions", "4", "--resume-grace", "0",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	pid := s.cmd.Process.Pid
	waitWarm(t, s)
	for _, tc := range []struct {
		name string
		stop func(t *testing.T, c *rtClient)
	}{
		{"response.cancel", func(t *testing.T, c *rtClient) { c.send(t, map[string]any{"type": "response.cancel"}) }},
		{"close", func(t *testing.T, c *rtClient) { _ = c.ws.Close(websocket.StatusNormalClosure, "bye") }},
		{"dropped connection", func(t *testing.T, c *rtClient) { _ = c.ws.CloseNow() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRTAt(t, s, "/v1/realtime", map[string]any{"turn_detection": nil, "modalities": []string{"text"}}, 5*time.Minute)
			defer c.close(t)
			c.send(t, textItem(admissionFiller(40<<10)))
			c.until(t, "conversation.item.added", 30*time.Second)
			c.send(t, map[string]any{"type": "response.create", "response": map[string]any{"max_output_tokens": 4}})
			c.until(t, "response.created", 30*time.Second)
			cpu0 := procCPU(t, pid)
			time.Sleep(300 * time.Millisecond)
			busy := procCPU(t, pid) - cpu0
			tc.stop(t, c)
			at, cpu := cpuSamples(t, pid, 1100*time.Millisecond)
			stops := burnStops(at, cpu)
			after := cpu[len(cpu)-1] - cpu[slices.IndexFunc(at, func(d time.Duration) bool { return d >= 100*time.Millisecond })]
			t.Logf("%s: %v of CPU in the 300 ms before; %v in the second from 100 ms after (busy until %v)", tc.name, busy, after, stops)
			require.Greater(t, busy, 50*time.Millisecond, "a prefill was running")
			// A prefill here uses 300-900 ms of CPU a second; idle, the server uses a few ms.
			require.Less(t, after, 100*time.Millisecond, "the prefill stopped within 100 ms")
		})
	}
	requireServes(t, s)
}
