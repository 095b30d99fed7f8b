package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Two quick turns on the real binary (issue 10): the second utterance is streamed and committed
// while the first response is still being generated, and its response is requested the moment
// the first one is done. Each turn gets its own table set (turn 1 and 2), its own t0 (the first
// append after the previous commit, docs/STATS.md), and only its own stage rows: the second
// utterance's listen rows, which the stages produce while turn 1 is open, go to turn 2.
func TestDuplexTwoQuickTurns(t *testing.T) {
	raw, err := os.ReadFile(goForwardRaw)
	require.NoError(t, err, "install pocketsphinx-testdata")
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--log-stats",
		"--log-format", "json", "--cache-dir", filepath.Join(t.TempDir(), "cache"))
	const maxTokens = 24
	session := map[string]any{"turn_detection": nil, "modalities": []string{"text"}, "max_response_output_tokens": maxTokens}

	// The same two utterances one after the other, each waiting for the previous answer: the
	// reference for what each turn's own rows are.
	seq := dialRT(t, s, session)
	var seqTurns [2]turnTables
	for i := range seqTurns {
		rid := seq.respondTo(t, raw)
		seq.until(t, "response.done", 30*time.Second)
		seqTurns[i] = waitTurn(t, s, rid)
	}
	seq.close(t)

	c := dialRT(t, s, session)
	firstA := c.stream(t, raw, 0)
	c.send(t, map[string]any{"type": "input_audio_buffer.commit", "response_create": true})
	created1 := c.untilEv(t, "response.created", 30*time.Second)
	r1 := responseID(created1.m)
	firstB := c.stream(t, raw, 0) // the user goes on speaking while turn 1 is generated
	c.send(t, map[string]any{"type": "input_audio_buffer.commit"})
	committedB := time.Now()
	var done1, created2, done2 rtEvent
	for done1.m == nil || responseID(done1.m) != r1 {
		done1 = c.untilEv(t, "response.done", 30*time.Second)
	}
	c.send(t, map[string]any{"type": "response.create"})
	created2 = c.untilEv(t, "response.created", 30*time.Second)
	r2 := responseID(created2.m)
	require.NotEqual(t, r1, r2)
	for done2.m == nil || responseID(done2.m) != r2 {
		done2 = c.untilEv(t, "response.done", 30*time.Second)
	}
	t.Logf("turn 1 done %.0f ms after the second utterance's commit (positive: that input came in while turn 1 was generated)",
		done1.at.Sub(committedB).Seconds()*1000)

	t1, t2 := waitTurn(t, s, r1), waitTurn(t, s, r2)
	time.Sleep(200 * time.Millisecond)
	c.close(t)
	time.Sleep(200 * time.Millisecond) // the close has run: it must not log either turn again
	for i, tt := range []turnTables{t1, t2} {
		rid := []string{r1, r2}[i]
		require.Equal(t, 1, turnOf(s.logs.String(), rid).sets, "turn %d: one table set", i+1)
		require.Equal(t, fmt.Sprint(i+1), tt.turn, "turn number")
		require.Equal(t, naturalReason([]map[string]any{done1.m, done2.m}[i]), tt.reason)
		require.Equal(t, 1, tt.titles["StageRequestStats"], "turn %d: its own stage table", i+1)
	}
	require.Equal(t, t1.req, t2.req, "one session, one stage-0 resource")

	// t0 is each turn's first append: e2e lies between response.created and response.done
	// measured from it by the client (50 ms for the two clocks and the log's rounding).
	for i, x := range []struct {
		tt            turnTables
		first         time.Time
		created, done rtEvent
	}{{t1, firstA, created1, done1}, {t2, firstB, created2, done2}} {
		lo := x.created.at.Sub(x.first).Seconds() * 1000
		hi := x.done.at.Sub(x.first).Seconds() * 1000
		t.Logf("turn %d: logged e2e %.0f ms; client: first append → response.created %.0f ms, → response.done %.0f ms",
			i+1, x.tt.e2eMs, lo, hi)
		require.Less(t, x.tt.e2eMs, hi+50, "turn %d: t0 is not before its first append", i+1)
		require.Greater(t, x.tt.e2eMs, lo-50, "turn %d: t0 is not after its first append", i+1)
	}

	// Each turn's stage rows are its own: the prompt tokens prefilled for it equal those of the
	// same turn taken alone, tokens out stay within max_output_tokens, and no stage ran longer
	// than its turn.
	for i, pair := range [][2]turnTables{{seqTurns[0], t1}, {seqTurns[1], t2}} {
		want, got := stageCol(t, pair[0], 0), stageCol(t, pair[1], 0)
		t.Logf("turn %d stage 0: quick %v; sequential %v", i+1, got, want)
		require.Equal(t, want["num_tokens_in"], got["num_tokens_in"], "turn %d: the same input, the same prompt", i+1)
		require.Positive(t, got["num_tokens_out"], "turn %d", i+1)
		require.LessOrEqual(t, got["num_tokens_out"], float64(maxTokens), "turn %d: only its own generation", i+1)
		for _, col := range pair[1].stageCols {
			for _, row := range []string{"stage_gen_time_ms", "serving_time_to_first_output_ms"} {
				if ms, ok := col[row].(float64); ok {
					require.LessOrEqual(t, ms, pair[1].e2eMs+1, "turn %d stage %v: %s longer than the turn", i+1, col["stage_id"], row)
				}
			}
		}
	}
	require.False(t, strings.Contains(s.logs.String(), "dropping stage metrics of an aborted"), "no rows dropped")
}

// stageCol returns stage id's column of a turn's StageRequestStats record.
func stageCol(t *testing.T, tt turnTables, id int) map[string]any {
	t.Helper()
	for _, col := range tt.stageCols {
		if col["stage_id"] == float64(id) {
			return col
		}
	}
	require.Failf(t, "no stage column", "stage %d in %v", id, tt.stageCols)
	return nil
}

// A turn that fails (issue 10, reason error), on real binaries: the front's thinker is a remote
// LLM, the back omniserve, which is killed mid-turn. The client gets an error event and a failed
// response.done; the turn's tables are logged once, with reason error, keeping the tokens
// generated before the failure; /metrics counts it as a failure.
func TestDuplexErrorTurnLogStats(t *testing.T) {
	raw, err := os.ReadFile(goForwardRaw)
	require.NoError(t, err, "install pocketsphinx-testdata")
	cache := filepath.Join(t.TempDir(), "cache")
	back := startBinaryAt(t, freePort(t), "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--log-format", "json", "--cache-dir", cache)
	cfg := filepath.Join(t.TempDir(), "front.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf("pipeline:\n  remote:\n    thinker: {base_url: %q, model: %q, "+
		"first_byte_timeout: 20s, idle_timeout: 20s, retries: 1, retry_backoff: 50ms}\n", "http://"+back.addr+"/v1", "dummy:tiny")), 0o600))
	front := startBinary(t, "--config", cfg, "--model", "dummy:tiny", "--log-stats", "--log-format", "json", "--cache-dir", cache)

	c := dialRT(t, front, map[string]any{"turn_detection": nil, "modalities": []string{"text"}, "max_response_output_tokens": 2000})
	first := c.stream(t, raw, 0)
	c.send(t, map[string]any{"type": "input_audio_buffer.commit", "response_create": true})
	rid := responseID(c.until(t, "response.created", 30*time.Second))
	deltas := 0
	c.until(t, "response.output_text.delta", 30*time.Second)
	deltas++
	require.NoError(t, back.cmd.Process.Kill())
	<-back.done
	var errEv map[string]any
	var done map[string]any
	var doneAt time.Time
	for done == nil {
		select {
		case ev, ok := <-c.events:
			require.True(t, ok, "connection ended before response.done")
			switch ev.m["type"] {
			case "response.output_text.delta":
				deltas++
			case "error":
				errEv = ev.m
			case "response.done":
				done, doneAt = ev.m, ev.at
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no response.done after the thinker died")
		}
	}
	require.NotNil(t, errEv, "an error event before response.done")
	msg, _ := errEv["error"].(map[string]any)["message"].(string)
	require.Contains(t, msg, "remote thinker", errEv)
	require.Equal(t, "failed", status(done))
	require.Equal(t, rid, done["response"].(map[string]any)["id"])

	tt := waitTurn(t, front, rid)
	require.Equal(t, "error", tt.reason)
	require.Equal(t, "1", tt.turn)
	s0 := stageCol(t, tt, 0)
	client := doneAt.Sub(first).Seconds() * 1000
	t.Logf("error turn: %d text deltas on the wire; stage 0 %v; logged e2e %.0f ms, client first append → response.done %.0f ms",
		deltas, s0, tt.e2eMs, client)
	// Each remote piece is one token and one delta.
	require.Equal(t, float64(deltas), s0["num_tokens_out"], "the tokens generated before the failure, as the client received them")
	require.Positive(t, tt.e2eMs)
	require.Less(t, tt.e2eMs, client+50, "t0 is the first append, the end no later than the failure")
	c.send(t, map[string]any{"type": "session.close"})
	c.until(t, "session.closed", 10*time.Second)
	c.close(t)
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, 1, turnOf(front.logs.String(), rid).sets, "logged once: the close does not log it again")

	code, body := front.get(t, "/metrics")
	require.Equal(t, 200, code)
	require.Regexp(t, `omniserve_request_failure_total\{finished_reason="error",kind="duplex",model_name="[^"]*"\} 1\b`, string(body))
}
