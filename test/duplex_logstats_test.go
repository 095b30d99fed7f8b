package test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// TestDuplexLogStats drives the real bin/omniserve with --log-stats through real WebSocket
// clients and real speech, and reads the per-turn tables back from its JSON log: one table set
// per assistant turn, titled with the turn's identity and the reason it ended (a duplex turn is
// logged like one chat completion, with omniserve's corrected finished reasons).
// One server serves every subtest; the last one shuts it down mid-turn.
func TestDuplexLogStats(t *testing.T) {
	raw, err := os.ReadFile("/usr/share/pocketsphinx/test/data/goforward.raw")
	require.NoError(t, err, "install pocketsphinx-testdata")
	// --resume-grace 0: a dropped connection ends its session at once (the disconnect case);
	// resume has its own test (resume_test.go).
	// --dummy-reply-words 60: the long session's replies run to their 60 tokens, so the shutdown
	// at the end lands while the engine still generates (a dummy reply of 8-32 words is done
	// before its first audio).
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--log-stats",
		"--log-format", "json", "--cache-dir", filepath.Join(t.TempDir(), "cache"), "--shutdown-timeout", "10s",
		"--resume-grace", "0", "--dummy-reply-words", "60")
	utterance := append(append([]byte{}, raw...), make([]byte, 32000)...) // + 1 s of silence: the VAD ends the turn

	text := map[string]any{"turn_detection": nil, "modalities": []string{"text"}, "max_response_output_tokens": 8}
	audio := map[string]any{"turn_detection": nil, "max_response_output_tokens": 8}
	long := map[string]any{"turn_detection": nil, "max_response_output_tokens": 60}

	t.Run("completed and second turn", func(t *testing.T) {
		c := dialRT(t, s, text)
		r1 := c.respondTo(t, raw)
		done := c.until(t, "response.done", 30*time.Second)
		require.Contains(t, []string{"completed", "incomplete"}, status(done), "a natural end (incomplete: max tokens)")
		tt := waitTurn(t, s, r1)
		require.Equal(t, 1, tt.sets, "exactly one table set")
		require.Equal(t, naturalReason(done), tt.reason, "a turn cut by max tokens logs length")
		require.Equal(t, "1", tt.turn)
		require.True(t, strings.HasPrefix(tt.req, "duplex-s."), tt.req)
		for _, kind := range []string{"RequestE2EStats", "StageRequestStats"} {
			require.Equal(t, 1, tt.titles[kind], kind)
		}
		require.NotContains(t, tt.omniTiming, "total=")
		require.NotContains(t, tt.omniTiming, "engine=")
		require.Positive(t, tt.e2eMs)
		u1 := usageMatchesStats(t, done, tt)
		require.Zero(t, u1.cachedText, "turn 1: nothing of the fresh sequence was cached before it")

		r2 := c.respondTo(t, raw)
		done2 := c.until(t, "response.done", 30*time.Second)
		require.Contains(t, []string{"completed", "incomplete"}, status(done2))
		t2 := waitTurn(t, s, r2)
		require.NotEqual(t, r1, r2)
		require.Equal(t, 1, t2.sets)
		require.Equal(t, "2", t2.turn)
		require.Equal(t, naturalReason(done2), t2.reason)
		require.Equal(t, tt.req, t2.req, "both turns ride the session's stage-0 resource")
		u2 := usageMatchesStats(t, done2, t2)
		require.GreaterOrEqual(t, u2.cachedText, u1.text, "turn 2 reads turn 1's prompt from the KV cache")
		require.Positive(t, u2.cachedAudio, "turn 1's user audio counts as cached")
		c.close(t)
	})

	cancels := []struct {
		name, reason string
		cut          func(t *testing.T, c *rtClient)
	}{
		{"barge_in", "barge_in", func(t *testing.T, c *rtClient) { c.send(t, map[string]any{"type": "barge_in"}) }},
		{"response.cancel", "cancel", func(t *testing.T, c *rtClient) { c.send(t, map[string]any{"type": "response.cancel"}) }},
		{"session.close", "close", func(t *testing.T, c *rtClient) {
			c.send(t, map[string]any{"type": "session.close"})
			c.until(t, "session.closed", 10*time.Second)
		}},
		{"disconnect", "close", func(t *testing.T, c *rtClient) { c.close(t) }},
	}
	for _, tc := range cancels {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRT(t, s, long)
			rid := c.respondTo(t, raw)
			c.until(t, "response.output_audio.delta", 30*time.Second)
			tc.cut(t, c)
			tt := waitTurn(t, s, rid)
			require.Equal(t, tc.reason, tt.reason)
			// The cut turn keeps its work: tokens out, stage 1's audio, and the audio delivered.
			cols := map[float64]map[string]any{}
			for _, col := range tt.stageCols {
				cols[col["stage_id"].(float64)] = col
			}
			require.Contains(t, cols, 0.0, "stage 0's column")
			require.Contains(t, cols, 1.0, "stage 1's column: its partial snapshot was waited for")
			require.Positive(t, cols[0]["num_tokens_out"], "tokens generated before the cut")
			require.Positive(t, cols[1]["audio_generated_frames"], "audio generated before the cut")
			require.Positive(t, tt.deliveredS, "audio delivered to the client before the cut")
			c.close(t)
			time.Sleep(200 * time.Millisecond) // the real close has run: nothing more may appear
			require.Equal(t, 1, turnOf(s.logs.String(), rid).sets, "one table set, nothing at the real close")
		})
	}

	t.Run("listen-only session", func(t *testing.T) {
		c := dialRT(t, s, map[string]any{"turn_detection": nil, "extra_body": map[string]any{"auto_response": true}})
		c.stream(t, make([]byte, 3*32000), 0) // 3 s of silence
		c.until(t, "response.listen", 10*time.Second)
		c.send(t, map[string]any{"type": "session.close"})
		c.until(t, "session.closed", 10*time.Second)
		c.close(t)
		time.Sleep(200 * time.Millisecond)
		require.NotContains(t, s.logs.String(), "req="+c.stage0Prefix(), "a session without a response prints no table")
	})

	t.Run("auto_response handoff arrival", func(t *testing.T) {
		c := dialRT(t, s, map[string]any{"turn_detection": nil, "max_response_output_tokens": 60,
			"extra_body": map[string]any{"auto_response": true}})
		c.stream(t, utterance, 0)
		first := c.until(t, "response.created", 30*time.Second)
		r1 := responseID(first)
		c.until(t, "response.output_audio.delta", 30*time.Second)
		// The second utterance arrives while the first response still plays, paced at 2x real
		// time; its first append is its t0. Under listen_only the engine owns the turns: 2.4 s
		// of speech is a substantial interruption, which cuts the first response (a short
		// remark would wait for it).
		sent := c.stream(t, utterance, 50*time.Millisecond)
		var created rtEvent
		for {
			created = c.untilEv(t, "response.created", 30*time.Second)
			if responseID(created.m) != r1 {
				break
			}
		}
		r2 := responseID(created.m)
		c.send(t, map[string]any{"type": "response.cancel"})
		var done rtEvent
		for {
			done = c.untilEv(t, "response.done", 10*time.Second)
			if responseID(done.m) == r2 {
				break
			}
		}
		t1, t2 := waitTurn(t, s, r1), waitTurn(t, s, r2)
		require.Equal(t, "barge_in", t1.reason, "the interruption cut the first response")
		require.Equal(t, "cancel", t2.reason)
		fromFirstAppend := done.at.Sub(sent).Seconds() * 1000
		fromBegin := done.at.Sub(created.at).Seconds() * 1000
		t.Logf("turn 2: logged e2e %.0f ms; client: first append → done %.0f ms, response.created → done %.0f ms",
			t2.e2eMs, fromFirstAppend, fromBegin)
		require.Less(t, t2.e2eMs, fromFirstAppend+50, "t0 is not before the first append")
		require.Greater(t, t2.e2eMs, fromBegin+(fromFirstAppend-fromBegin)/2,
			"t0 is the first (speech) append of the utterance, not the response's begin")
		c.close(t)
	})

	t.Run("silence before speech does not stamp t0", func(t *testing.T) {
		c := dialRT(t, s, map[string]any{"turn_detection": nil, "max_response_output_tokens": 60,
			"extra_body": map[string]any{"auto_response": true}})
		quiet := c.stream(t, make([]byte, 4*32000), 50*time.Millisecond) // 4 s of silence at 2x real time
		speech := c.stream(t, utterance, 50*time.Millisecond)
		created := c.untilEv(t, "response.created", 30*time.Second)
		rid := responseID(created.m)
		c.send(t, map[string]any{"type": "response.cancel"})
		var done rtEvent
		for {
			done = c.untilEv(t, "response.done", 10*time.Second)
			if responseID(done.m) == rid {
				break
			}
		}
		tt := waitTurn(t, s, rid)
		fromSpeech := done.at.Sub(speech).Seconds() * 1000
		fromSilence := done.at.Sub(quiet).Seconds() * 1000
		t.Logf("logged e2e %.0f ms; client: first speech append → done %.0f ms, first silence append → done %.0f ms",
			tt.e2eMs, fromSpeech, fromSilence)
		require.Less(t, tt.e2eMs, fromSpeech+50, "t0 is not before the speech: silence never stamps")
		c.close(t)
	})

	t.Run("cancel right after response.create", func(t *testing.T) {
		c := dialRT(t, s, long)
		c.stream(t, raw, 0)
		// The commit creates the response at once (precreate); the cancel follows before the
		// engine has started it.
		c.send(t, map[string]any{"type": "input_audio_buffer.commit", "response_create": true})
		c.send(t, map[string]any{"type": "response.cancel"})
		// (The cancel drops the still-queued response.created of the old epoch; response.done
		// names the response.)
		done := c.until(t, "response.done", 30*time.Second)
		require.Equal(t, "cancelled", status(done))
		rid := responseID(done)
		// No engine work ran for it (the cancel came first): its set has no stage table.
		var tt turnTables
		require.Eventually(t, func() bool {
			tt = turnOf(s.logs.String(), rid)
			return tt.sets > 0
		}, 15*time.Second, 20*time.Millisecond, "no tables for %s", rid)
		require.Equal(t, "cancel", tt.reason)
		time.Sleep(200 * time.Millisecond)
		require.Equal(t, 1, turnOf(s.logs.String(), rid).sets, "logged once")
		c.close(t)
	})

	t.Run("clear then a new utterance", func(t *testing.T) {
		c := dialRT(t, s, text)
		c.stream(t, raw, 20*time.Millisecond) // the cleared utterance: about 1.7 s of sending
		c.send(t, map[string]any{"type": "input_audio_buffer.clear"})
		c.until(t, "input_audio_buffer.cleared", 10*time.Second)
		second := c.stream(t, raw, 0)
		c.send(t, map[string]any{"type": "input_audio_buffer.commit", "response_create": true})
		rid := responseID(c.until(t, "response.created", 30*time.Second))
		var done rtEvent
		for {
			done = c.untilEv(t, "response.done", 30*time.Second)
			if responseID(done.m) == rid {
				break
			}
		}
		tt := waitTurn(t, s, rid)
		fromSecond := done.at.Sub(second).Seconds() * 1000
		t.Logf("logged e2e %.0f ms; client: first append after the clear → done %.0f ms", tt.e2eMs, fromSecond)
		require.Less(t, tt.e2eMs, fromSecond+50, "t0 is the first append after the clear: the cleared input is billed to no turn")
		c.close(t)
	})

	t.Run("metrics count turns by the tables' reasons", func(t *testing.T) {
		resp, err := http.Get("http://" + s.addr + "/metrics") //nolint:noctx // bounded by the server under test
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		logged := map[string]int{}
		for _, r := range statsRecords(s.logs.String()) {
			if r.Msg == "OmniTiming" && r.ResponseID != "" {
				logged[r.Reason]++
				require.Equal(t, "vllm_duplex", r.Dialect, "?duplex=1 speaks vllm-omni's dialect: its tables say so")
			}
		}
		require.NotEmpty(t, logged)
		for reason, n := range logged {
			re := regexp.MustCompile(`omniserve_duplex_turns_total\{dialect="vllm_duplex",finished_reason="` + reason + `",model_name="[^"]*"\} (\d+)`)
			m := re.FindSubmatch(body)
			require.NotNil(t, m, "no duplex_turns_total series for %s", reason)
			got, err := strconv.Atoi(string(m[1]))
			require.NoError(t, err)
			require.Equal(t, n, got, "turns with reason %s: tables vs /metrics", reason)
		}
	})

	t.Run("chat and duplex rows", func(t *testing.T) {
		c := dialRT(t, s, audio)
		rid := c.respondTo(t, raw)
		require.Contains(t, []string{"completed", "incomplete"}, status(c.until(t, "response.done", 30*time.Second)))
		duplexRows := waitTurn(t, s, rid).stageRows
		c.close(t)

		wav, _ := goForwardWAV(t)
		body, err := json.Marshal(map[string]any{"model": "dummy:tiny", "max_tokens": 8,
			"modalities": []string{"text", "audio"}, "audio": map[string]any{"voice": "alloy", "format": "pcm16"},
			"messages": []map[string]any{{"role": "user", "content": []map[string]any{{"type": "input_audio",
				"input_audio": map[string]any{"data": base64.StdEncoding.EncodeToString(wav), "format": "wav"}}}}}})
		require.NoError(t, err)
		resp, err := http.Post("http://"+s.addr+"/v1/chat/completions", "application/json", strings.NewReader(string(body))) //nolint:noctx // bounded by the server under test
		require.NoError(t, err)
		var cc struct {
			ID string `json:"id"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&cc))
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var chatRows []string
		require.Eventually(t, func() bool {
			chatRows = stageRowsOf(s.logs.String(), cc.ID)
			return len(chatRows) > 0
		}, 10*time.Second, 20*time.Millisecond, "chat tables of %s", cc.ID)
		// Known gap, outside the duplex path: the chat path (requestclient/chat_state.go) never
		// derives time_per_output_unit_ms, while a turn's collapse recomputes it from the merged
		// segments when it folds them into one row per stage. Every other row must match.
		duplexRows = slices.DeleteFunc(duplexRows, func(f string) bool { return f == "time_per_output_unit_ms" })
		require.NotContains(t, chatRows, "time_per_output_unit_ms", "the chat path derives it now: drop this exception")
		require.Equal(t, chatRows, duplexRows, "a duplex turn and a chat request print the same StageRequestStats rows")
	})

	t.Run("server shutdown aborts", func(t *testing.T) {
		c := dialRT(t, s, long)
		rid := c.respondTo(t, raw)
		c.until(t, "response.output_audio.delta", 30*time.Second)
		require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
		closed := c.until(t, "session.closed", 15*time.Second)
		require.Equal(t, "shutdown", closed["reason"], "the wire keeps its reason")
		require.Equal(t, 0, s.exitCode(t, 15*time.Second), s.logs.String())
		tt := turnOf(s.logs.String(), rid)
		require.Equal(t, 1, tt.sets)
		require.Equal(t, "abort", tt.reason, "the server aborted the engine work under the turn")
		c.close(t)
	})
}

// rtClient is one WebSocket session; a reader goroutine timestamps every server event.
type rtClient struct {
	ws     *websocket.Conn
	sid    string
	events chan rtEvent
	done   chan struct{}
	ctx    context.Context
	// readErr is the error that ended the reader (the close status, when the server sent one);
	// read it after done.
	readErr error
}

type rtEvent struct {
	m  map[string]any
	at time.Time
}

func dialRT(t *testing.T, s *binServer, session map[string]any) *rtClient {
	t.Helper()
	return dialRTFor(t, s, session, 90*time.Second)
}

// dialRTFor is dialRT for a connection that may live up to life (dialRT: 90 s).
func dialRTFor(t *testing.T, s *binServer, session map[string]any, life time.Duration) *rtClient {
	t.Helper()
	return dialRTAt(t, s, "/v1/realtime?duplex=1", session, life)
}

// dialRTAt is dialRTFor on path (with its query).
func dialRTAt(t *testing.T, s *binServer, path string, session map[string]any, life time.Duration) *rtClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), life)
	ws, _, err := websocket.Dial(ctx, "ws://"+s.addr+path, nil) //nolint:bodyclose // coder/websocket closes it
	require.NoError(t, err)
	ws.SetReadLimit(64 << 20)
	c := &rtClient{ws: ws, events: make(chan rtEvent, 4096), done: make(chan struct{}), ctx: ctx}
	go func() {
		defer close(c.done)
		defer close(c.events)
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				c.readErr = err
				return
			}
			var m map[string]any
			if json.Unmarshal(b, &m) != nil {
				continue
			}
			select {
			case c.events <- rtEvent{m: m, at: time.Now()}:
			default: // a test that stopped reading does not block the connection
			}
		}
	}()
	t.Cleanup(func() {
		_ = ws.CloseNow()
		<-c.done
		cancel()
	})
	if _, ok := session["input_audio_format"]; !ok {
		// goforward.raw is 16 kHz; pcm16 without a rate is OpenAI's 24 kHz.
		session["input_audio_format"] = map[string]any{"type": "pcm16", "rate": 16000}
	}
	c.send(t, map[string]any{"type": "session.update", "session": session})
	created := c.until(t, "session.created", 10*time.Second)
	c.sid, _ = created["session"].(map[string]any)["id"].(string)
	require.NotEmpty(t, c.sid)
	c.until(t, "session.updated", 10*time.Second)
	return c
}

func (c *rtClient) send(t *testing.T, ev map[string]any) {
	t.Helper()
	b, err := json.Marshal(ev)
	require.NoError(t, err)
	require.NoError(t, c.ws.Write(c.ctx, websocket.MessageText, b))
}

func (c *rtClient) until(t *testing.T, typ string, timeout time.Duration) map[string]any {
	t.Helper()
	return c.untilEv(t, typ, timeout).m
}

// untilEv returns the next event of type typ; an error event fails the test.
func (c *rtClient) untilEv(t *testing.T, typ string, timeout time.Duration) rtEvent {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-c.events:
			require.True(t, ok, "connection ended while waiting for %s", typ)
			if ev.m["type"] == typ {
				return ev
			}
			require.NotEqual(t, "error", ev.m["type"], "waiting for %s: %v", typ, ev.m["error"])
		case <-deadline:
			t.Fatalf("no %s within %s", typ, timeout)
		}
	}
}

// stream sends pcm16 16 kHz audio in 100 ms appends, gap apart, and returns when the first
// one was written.
func (c *rtClient) stream(t *testing.T, pcm []byte, gap time.Duration) time.Time {
	t.Helper()
	var first time.Time
	for i := 0; i < len(pcm); i += 3200 {
		b := base64.StdEncoding.EncodeToString(pcm[i:min(i+3200, len(pcm))])
		if i == 0 {
			first = time.Now()
		}
		c.send(t, map[string]any{"type": "input_audio_buffer.append", "audio": b})
		if gap > 0 {
			time.Sleep(gap)
		}
	}
	return first
}

// respondTo sends an utterance faster than real time (response_required: the server buffers it)
// and commits it with a response; it returns the response id.
func (c *rtClient) respondTo(t *testing.T, pcm []byte) string {
	t.Helper()
	c.stream(t, pcm, 0)
	c.send(t, map[string]any{"type": "input_audio_buffer.commit", "response_create": true})
	return responseID(c.until(t, "response.created", 30*time.Second))
}

func (c *rtClient) close(t *testing.T) {
	t.Helper()
	_ = c.ws.CloseNow()
	<-c.done
}

// stage0Prefix is the session's stage-0 resource id up to the epoch.
func (c *rtClient) stage0Prefix() string {
	return "duplex-s." + base64.RawURLEncoding.EncodeToString([]byte(c.sid)) + ".i."
}

func responseID(ev map[string]any) string {
	id, _ := ev["response_id"].(string)
	return id
}

func status(done map[string]any) string {
	st, _ := done["response"].(map[string]any)["status"].(string)
	return st
}

// turnTables is what the log holds for one response id.
type turnTables struct {
	sets       int            // [OmniTiming] lines
	titles     map[string]int // table kind → count
	req        string
	turn       string
	reason     string
	omniTiming string
	e2eMs      float64
	stageRows  []string
	stageCols  []map[string]any // the StageRequestStats record's columns
	deliveredS float64          // RequestE2EStats audio_delivered_s
	playedS    float64          // RequestE2EStats audio_played_s (the client's playback.ack)
}

// naturalReason is the logged reason of a response that ended by itself: the wire's
// incomplete (max_output_tokens) is length in the logs, completed is stop.
func naturalReason(done map[string]any) string {
	details, _ := done["response"].(map[string]any)["status_details"].(map[string]any)
	// OpenAI's dialect says incomplete; vllm-omni's (?duplex=1) completed, with the same details.
	if status(done) == "incomplete" || (details != nil && details["reason"] == "max_output_tokens") {
		return "length"
	}
	return "stop"
}

// rtUsage is the text and audio split of a response.done usage.
type rtUsage struct{ text, cachedText, cachedAudio, outText int }

// usageMatchesStats checks a response.done usage against the turn's statistics: integers that
// add up, input text tokens less the cached ones equal to stage 0's num_tokens_in (the tokens
// the engine prefilled for the turn), output text tokens equal to its num_tokens_out.
func usageMatchesStats(t *testing.T, done map[string]any, tt turnTables) rtUsage {
	t.Helper()
	u, ok := done["response"].(map[string]any)["usage"].(map[string]any)
	require.True(t, ok, "response.done has usage")
	n := func(m map[string]any, k string) int {
		v, ok := m[k].(float64)
		require.True(t, ok, "usage %s is a number: %v", k, m[k])
		require.Equal(t, math.Trunc(v), v, "usage %s is an integer", k)
		return int(v)
	}
	in, out := u["input_token_details"].(map[string]any), u["output_token_details"].(map[string]any)
	cached := in["cached_tokens_details"].(map[string]any)
	got := rtUsage{text: n(in, "text_tokens"), cachedText: n(cached, "text_tokens"), cachedAudio: n(cached, "audio_tokens"), outText: n(out, "text_tokens")}
	require.Equal(t, n(u, "input_tokens")+n(u, "output_tokens"), n(u, "total_tokens"))
	require.Equal(t, got.text+n(in, "audio_tokens")+n(in, "image_tokens"), n(u, "input_tokens"))
	require.Equal(t, got.outText+n(out, "audio_tokens"), n(u, "output_tokens"))
	require.Equal(t, got.cachedText+got.cachedAudio+n(cached, "image_tokens"), n(in, "cached_tokens"))
	var stage0 map[string]any
	for _, col := range tt.stageCols {
		if col["stage_id"] == 0.0 {
			stage0 = col
		}
	}
	require.NotNil(t, stage0, "stage 0's column")
	t.Logf("usage %v; stage 0 num_tokens_in %v num_tokens_out %v", u, stage0["num_tokens_in"], stage0["num_tokens_out"])
	require.Positive(t, got.text-got.cachedText)
	require.Equal(t, stage0["num_tokens_in"], float64(got.text-got.cachedText), "prefilled text tokens = the stats' num_tokens_in")
	require.Equal(t, stage0["num_tokens_out"], float64(got.outText), "output text tokens = the stats' num_tokens_out")
	return got
}

// statsRecord is one structured --log-format json statistics record (docs/STATS.md): one per
// table, its fields the table's rows plus the ids.
type statsRecord struct {
	Msg        string           `json:"msg"`
	RequestID  string           `json:"request_id"`
	ResponseID string           `json:"response_id"`
	Turn       *int             `json:"turn"`
	Reason     string           `json:"reason"`
	Dialect    string           `json:"dialect"` // the logger's field: the session's wire dialect
	Line       string           `json:"line"`
	E2ETotalMs *float64         `json:"e2e_total_ms"`
	DeliveredS float64          `json:"audio_delivered_s"`
	PlayedS    float64          `json:"audio_played_s"`
	Stages     []map[string]any `json:"stages"`
	// The RequestE2EStats figures the input and output.audio spans are placed by.
	InputMs         float64 `json:"input_ms"`
	DeliveryTotalMs float64 `json:"delivery_total_ms"`
	// The ToolCallStats record's columns (kind, calls, failed_calls, max_time_ms, total_time_ms).
	Kinds []map[string]any `json:"kinds"`
}

// statsRecords returns every statistics record of a JSON log.
func statsRecords(logs string) []statsRecord {
	var out []statsRecord
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r statsRecord
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.RequestID == "" {
			continue
		}
		switch r.Msg {
		case "Overall Summary", "RequestE2EStats", "OmniTiming", "StageRequestStats", "TransferEdgeStats", "ToolCallStats":
			out = append(out, r)
		}
	}
	return out
}

func turnOf(logs, responseID string) turnTables {
	tt := turnTables{titles: map[string]int{}}
	for _, r := range statsRecords(logs) {
		if r.ResponseID != responseID {
			continue
		}
		if strings.HasPrefix(r.Line, "[OmniTiming] ") {
			tt.sets++
			tt.omniTiming = r.Line
			tt.reason = r.Reason
			continue
		}
		tt.titles[r.Msg]++
		tt.req = r.RequestID
		if r.Turn != nil {
			tt.turn = strconv.Itoa(*r.Turn)
		}
		switch r.Msg {
		case "RequestE2EStats":
			if r.E2ETotalMs != nil {
				tt.e2eMs = *r.E2ETotalMs
			}
			tt.deliveredS = r.DeliveredS
			tt.playedS = r.PlayedS
		case "StageRequestStats":
			tt.stageRows = recordFields(r.Stages)
			tt.stageCols = r.Stages
		}
	}
	return tt
}

// recordFields returns the row names of a StageRequestStats record's columns, sorted.
func recordFields(cols []map[string]any) []string {
	set := map[string]bool{}
	for _, c := range cols {
		for k := range c {
			if k != "stage_id" {
				set[k] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// waitTurn waits until the turn's OmniTiming record is in the log (the tables are logged just
// before it) and returns its tables.
func waitTurn(t *testing.T, s *binServer, responseID string) turnTables {
	t.Helper()
	var tt turnTables
	require.Eventually(t, func() bool {
		tt = turnOf(s.logs.String(), responseID)
		return tt.sets > 0 && tt.titles["StageRequestStats"] > 0
	}, 15*time.Second, 20*time.Millisecond, "no tables for %s", responseID)
	return tt
}

// stageRowsOf returns the row names of the first StageRequestStats record whose request id
// starts with key.
func stageRowsOf(logs, key string) []string {
	for _, r := range statsRecords(logs) {
		if r.Msg == "StageRequestStats" && strings.HasPrefix(r.RequestID, key) {
			return recordFields(r.Stages)
		}
	}
	return nil
}
