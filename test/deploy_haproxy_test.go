package test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/testenv"
)

// TestHAProxyReplicas runs deploy/haproxy/haproxy.cfg in the real HAProxy in front of three
// real omniserve replicas on loopback: 12 realtime sessions spread by least connections, one
// replica is drained with SIGTERM, every one of its sessions ends with session.closed (none is
// lost silently), the others keep working, and new sessions land only on the other replicas.
func TestHAProxyReplicas(t *testing.T) {
	reps, addr, statsURL := startBalancedReplicas(t, "--shutdown-timeout", "3s")
	session := map[string]any{"turn_detection": nil, "modalities": []string{"text"}, "max_response_output_tokens": 8,
		"input_audio_format": map[string]any{"type": "pcm16", "rate": 16000}} // goforward.raw is 16 kHz
	type live struct {
		c       *rtClient
		replica string
	}
	var sessions []live
	per := map[string]int{}
	for range 12 {
		c, rep := dialVia(t, addr, session)
		sessions = append(sessions, live{c, rep})
		per[rep]++
	}
	t.Logf("sessions per replica: %v", per)
	require.Len(t, per, 3, "every replica got sessions")
	for rep, n := range per {
		require.Equal(t, 4, n, "least connections spreads 12 sessions 4/4/4 (%s)", rep)
	}

	// Drain omniserve1.
	victim := reps[0]
	require.NoError(t, victim.cmd.Process.Signal(syscall.SIGTERM))
	var code int
	require.Eventually(t, func() bool {
		code, _ = victim.get(t, "/ready")
		return code != http.StatusOK
	}, 5*time.Second, 10*time.Millisecond, "the replica stays ready after SIGTERM")
	switch code {
	case http.StatusServiceUnavailable:
		t.Log("draining replica answers /ready 503 with its listener open")
	case 0:
		// TODO: require 503 only once the drain contract (/ready 503, listener kept open for
		// the grace period) has landed; until then the listener closes at SIGTERM, which keeps
		// new sessions away as well (HAProxy's check fails on connect; retries redispatch).
		t.Log("draining replica closed its listener at SIGTERM (drain contract not in this build)")
	default:
		t.Fatalf("draining replica answered /ready %d", code)
	}
	require.Eventually(t, func() bool { return serverStates(statsURL)["omniserve1"] != "UP" }, 10*time.Second, 50*time.Millisecond,
		"HAProxy still sends to the draining replica")

	// New sessions land on the others.
	for range 4 {
		c, rep := dialVia(t, addr, session)
		require.NotEqual(t, "omniserve1", rep, "a new session landed on the draining replica")
		sessions = append(sessions, live{c, rep})
	}

	// No session is lost without session.closed: the drained replica's sessions end with it,
	// the others keep working.
	for _, s := range sessions {
		if s.replica != "omniserve1" {
			continue
		}
		types := drainEvents(t, s.c, 30*time.Second)
		require.Contains(t, types, "session.closed", "a session of the drained replica ended without session.closed: %v", types)
	}
	require.Equal(t, 0, victim.exitCode(t, 30*time.Second), "the drained replica exits cleanly")
	for _, s := range sessions {
		if s.replica == "omniserve1" {
			continue
		}
		s.c.send(t, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
			"content": []map[string]any{{"type": "input_text", "text": "Say something about the weather."}}}})
		s.c.until(t, "conversation.item.added", 10*time.Second)
		s.c.send(t, map[string]any{"type": "response.create"})
		require.Contains(t, []string{"completed", "incomplete"}, status(s.c.until(t, "response.done", 30*time.Second)),
			"session on %s", s.replica)
		s.c.close(t)
	}
}

// dialVia opens a realtime session through the balancer and returns it with the name of the
// replica HAProxy chose (its X-Omniserve-Replica header on the 101).
func dialVia(t *testing.T, addr string, session map[string]any) (*rtClient, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	ws, resp, err := websocket.Dial(ctx, "ws://"+addr+"/v1/realtime?duplex=1", nil) //nolint:bodyclose // coder/websocket closes it
	require.NoError(t, err)
	replica := resp.Header.Get("X-Omniserve-Replica")
	require.NotEmpty(t, replica)
	c := &rtClient{ws: ws, events: make(chan rtEvent, 4096), done: make(chan struct{}), ctx: ctx}
	go func() {
		defer close(c.done)
		defer close(c.events)
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				return
			}
			var m map[string]any
			if json.Unmarshal(b, &m) != nil {
				continue
			}
			select {
			case c.events <- rtEvent{m: m, at: time.Now()}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		_ = ws.CloseNow()
		<-c.done
		cancel()
	})
	c.send(t, map[string]any{"type": "session.update", "session": session})
	c.until(t, "session.created", 10*time.Second)
	c.until(t, "session.updated", 10*time.Second)
	return c, replica
}

// drainEvents reads a session's events until its connection ends and returns their types.
func drainEvents(t *testing.T, c *rtClient, timeout time.Duration) []string {
	t.Helper()
	var types []string
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				return types
			}
			typ, _ := ev.m["type"].(string)
			types = append(types, typ)
		case <-deadline:
			t.Fatalf("session still open %s after the drain began; events: %v", timeout, types)
		}
	}
}

// serverStates reads HAProxy's CSV stats: server name → status (UP, DOWN, MAINT, ...).
func serverStates(url string) map[string]string {
	client := http.Client{Timeout: time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	r := csv.NewReader(resp.Body)
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil || len(rows) == 0 {
		return nil
	}
	col := -1
	for i, h := range rows[0] {
		if strings.TrimPrefix(h, "# ") == "status" {
			col = i
		}
	}
	out := map[string]string{}
	for _, row := range rows[1:] {
		if col >= 0 && len(row) > col && row[0] == "omniserve" {
			out[row[1]] = strings.Fields(row[col] + " ?")[0]
		}
	}
	return out
}

// startBalancedReplicas starts three replicas (bin/omniserve on dummy:tiny, with args) behind
// the real HAProxy running deploy/haproxy/haproxy.cfg, and waits until HAProxy sees all three
// UP. It returns the replicas, the balancer's front address (host:port) and its stats CSV URL.
// Everything is stopped at cleanup.
func startBalancedReplicas(t *testing.T, args ...string) ([]*binServer, string, string) {
	t.Helper()
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		testenv.Missing(t, "haproxy is not installed: `make deps` installs it")
	}
	cache := filepath.Join(t.TempDir(), "cache")
	reps := make([]*binServer, 3)
	for i := range reps {
		reps[i] = startBinary(t, append([]string{"--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--cache-dir", cache}, args...)...)
	}
	front, stats := freePort(t), freePort(t)
	hp := exec.Command(haproxy, "-db", "-f", filepath.Join(repoRoot(t), "deploy", "haproxy", "haproxy.cfg"))
	hp.Env = append(os.Environ(),
		"OMNISERVE_BIND=127.0.0.1:"+strconv.Itoa(front), "OMNISERVE_STATS_BIND=127.0.0.1:"+strconv.Itoa(stats),
		"OMNISERVE_1="+reps[0].addr, "OMNISERVE_2="+reps[1].addr, "OMNISERVE_3="+reps[2].addr)
	hpLogs := &syncBuf{}
	hp.Stdout, hp.Stderr = hpLogs, hpLogs
	require.NoError(t, hp.Start())
	hpDone := make(chan struct{})
	go func() { _ = hp.Wait(); close(hpDone) }()
	t.Cleanup(func() {
		_ = hp.Process.Signal(syscall.SIGTERM)
		select {
		case <-hpDone:
		case <-time.After(5 * time.Second):
			_ = hp.Process.Kill()
			<-hpDone
		}
	})
	statsURL := "http://127.0.0.1:" + strconv.Itoa(stats) + "/stats;csv"
	require.Eventually(t, func() bool {
		st := serverStates(statsURL)
		return st["omniserve1"] == "UP" && st["omniserve2"] == "UP" && st["omniserve3"] == "UP"
	}, 20*time.Second, 100*time.Millisecond, "replicas not UP in HAProxy:\n%s", hpLogs.String())
	return reps, "127.0.0.1:" + strconv.Itoa(front), statsURL
}
