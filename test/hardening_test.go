package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// procCPU is the CPU time (user + system) the process has used so far, from /proc/<pid>/stat.
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	// The fields after the command name (which may hold spaces) start after its ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, err := strconv.ParseInt(f[11], 10, 64)
	require.NoError(t, err)
	stime, err := strconv.ParseInt(f[12], 10, 64)
	require.NoError(t, err)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ is 100 on Linux
}

// hardNested is a JSON schema of n nested arrays: issue 40's 4,990-level schema SIGSEGVed the
// server in llama.cpp's schema_to_grammar.
func hardNested(n int) string {
	return strings.Repeat(`{"type":"array","items":`, n) + `{"type":"string"}` + strings.Repeat("}", n)
}

// TestHardeningBounds replays issue 40's attacks on JSON documents and CORS against a real
// bin/omniserve with no API key (the default): each is refused in under a second of wall time
// and of server CPU, and the server still serves afterwards.
func TestHardeningBounds(t *testing.T) {
	t.Parallel()
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	base := "http://" + s.addr
	pid := s.cmd.Process.Pid

	t.Run("deep schemas", func(t *testing.T) {
		const msgs = `"model":"dummy:tiny","messages":[{"role":"user","content":"hi"}]`
		for _, tc := range []struct {
			name, body, param string
		}{
			{"response_format 4990", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + hardNested(4990) + `}}}`, "response_format.json_schema.schema"},
			// The shape that SIGSEGVed 7161a1b in cgo after 4.5 s of CPU (objects recurse deeper in
			// schema_to_grammar than arrays, which got a 400 after 4.3 s).
			{"response_format 4990 objects", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` +
				strings.Repeat(`{"type":"object","properties":{"a":`, 4990) + `{"type":"string"}` + strings.Repeat("}}", 4990) + `}}}`, "response_format.json_schema.schema"},
			{"response_format 9000", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + hardNested(9000) + `}}}`, "response_format.json_schema.schema"},
			{"tool parameters 4990", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":` + hardNested(4990) + `}}}}]}`, "tools[0].function.parameters"},
		} {
			cpu0, start := procCPU(t, pid), time.Now()
			resp, body := postWith(t, base+"/v1/chat/completions", "", "application/json", tc.body)
			took, cpu := time.Since(start), procCPU(t, pid)-cpu0
			t.Logf("%s (%d KB): %d in %s, server CPU %s", tc.name, len(tc.body)>>10, resp.StatusCode, took.Round(time.Millisecond), cpu)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
			require.Contains(t, string(body), `"param":"`+tc.param+`"`)
			require.Contains(t, string(body), "nested deeper than 64 levels")
			require.Less(t, took, time.Second, tc.name)
			require.Less(t, cpu, time.Second, tc.name)
		}
	})

	t.Run("realtime function tool", func(t *testing.T) {
		c := dialRT(t, s, map[string]any{"turn_detection": nil, "modalities": []string{"text"}})
		defer c.close(t)
		cpu0, start := procCPU(t, pid), time.Now()
		c.send(t, map[string]any{"type": "session.update", "event_id": "ev_deep", "session": map[string]any{"tools": []any{
			map[string]any{"type": "function", "name": "f", "parameters": json.RawMessage(`{"type":"object","properties":{"a":` + hardNested(4990) + `}}`)}}}})
		e := c.nextError(t, 10*time.Second)
		t.Logf("realtime tool parameters 4990: error in %s, server CPU %s", time.Since(start).Round(time.Millisecond), procCPU(t, pid)-cpu0)
		require.Equal(t, "invalid_value", e["code"], "%v", e)
		require.Equal(t, "session.tools[0].parameters", e["param"], "%v", e)
		require.Less(t, time.Since(start), time.Second)
		c.requireStillServes(t)
	})

	// A session.update with no session object is an empty update (its fields, if any, beside the
	// event's own): at 7161a1b its own type was read as the session's ("Invalid value for
	// 'session.type': \"session.update\"").
	t.Run("session.update without a session object", func(t *testing.T) {
		c := dialRT(t, s, map[string]any{"turn_detection": nil, "modalities": []string{"text"}})
		defer c.close(t)
		c.send(t, map[string]any{"type": "session.update", "event_id": "ev_flat"})
		upd := c.until(t, "session.updated", 10*time.Second)
		sess, ok := upd["session"].(map[string]any)
		require.True(t, ok, "%v", upd)
		require.Equal(t, "realtime", sess["type"], "%v", sess)
		c.send(t, map[string]any{"type": "session.update", "instructions": "Answer in one word."})
		sess, ok = c.until(t, "session.updated", 10*time.Second)["session"].(map[string]any)
		require.True(t, ok)
		require.Equal(t, "Answer in one word.", sess["instructions"])
		c.requireStillServes(t)
	})

	t.Run("60 MiB SDP offer", func(t *testing.T) {
		cpu0, start := procCPU(t, pid), time.Now()
		offer := "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n" + strings.Repeat("a=x\r\n", 12<<20)
		resp, err := http.Post(base+"/v1/realtime/calls", "application/sdp", strings.NewReader(offer)) //nolint:noctx // bounded by the server under test
		require.NoError(t, err)
		resp.Body.Close()
		t.Logf("60 MiB SDP offer: %d in %s, server CPU %s", resp.StatusCode, time.Since(start).Round(time.Millisecond), procCPU(t, pid)-cpu0)
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
		require.Less(t, time.Since(start), time.Second)
	})

	t.Run("CORS default without a key: local pages only", func(t *testing.T) {
		preflight := func(origin string) *http.Response {
			req, err := http.NewRequest(http.MethodOptions, base+"/v1/realtime/client_secrets", nil)
			require.NoError(t, err)
			req.Header.Set("Origin", origin)
			req.Header.Set("Access-Control-Request-Method", "POST")
			req.Header.Set("Access-Control-Request-Headers", "content-type")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			return resp
		}
		evil := preflight("https://evil.example")
		require.Equal(t, http.StatusForbidden, evil.StatusCode)
		require.Empty(t, evil.Header.Get("Access-Control-Allow-Origin"))
		local := preflight("http://localhost:5173")
		require.Equal(t, http.StatusNoContent, local.StatusCode)
		require.Equal(t, "http://localhost:5173", local.Header.Get("Access-Control-Allow-Origin"))
	})

	t.Run("client secret session", func(t *testing.T) {
		for _, tc := range []struct {
			name, session, code, param string
		}{
			{"unknown field", `{"type":"realtime","padding":"` + strings.Repeat("x", 1<<20) + `"}`, "unknown_parameter", "session.padding"},
			{"too deep", `{"type":"realtime","tools":[{"type":"function","name":"f","parameters":` + hardNested(4990) + `}]}`, "invalid_value", "session"},
		} {
			start := time.Now()
			resp, body := postWith(t, base+"/v1/realtime/client_secrets", "", "application/json", `{"session":`+tc.session+`}`)
			require.Less(t, time.Since(start), time.Second, tc.name)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", tc.name, body)
			require.Contains(t, string(body), `"code":"`+tc.code+`"`, tc.name)
			require.Contains(t, string(body), `"param":"`+tc.param+`"`, tc.name)
		}
		resp, body := postWith(t, base+"/v1/realtime/client_secrets", "", "application/json", `{"session":{"type":"realtime","instructions":"hi"}}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	})

	requireServes(t, s)
}

// TestShutdownBlackHoledCollector: SIGTERM while the OTLP collector accepts connections and
// never answers does not wait out the shutdown deadline, and the engine is still closed.
func TestShutdownBlackHoledCollector(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // held open, never answered
		}
	}()
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"), "--otlp-endpoint", "http://"+ln.Addr().String())
	resp, body := postWith(t, "http://"+s.addr+"/v1/chat/completions", "", "application/json",
		`{"model":"dummy:tiny","messages":[{"role":"user","content":"hello"}],"max_tokens":3}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body)) // a span is queued for export
	start := time.Now()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	require.Zero(t, s.exitCode(t, 20*time.Second))
	took := time.Since(start)
	t.Logf("SIGTERM → exit in %s with a black-holed collector", took.Round(time.Millisecond))
	require.Less(t, took, 10*time.Second, "the default --shutdown-timeout is 30 s; the flush is bounded")
	require.Contains(t, s.logs.String(), "shutdown: closed engine", s.logs.String())
}

// TestMCPHardening: an MCP server listing a tool whose input schema nests 900 levels (the SDK's
// own JSON decoding stops at 1,000 on both sides) fails its listing (mcp_list_tools.failed, the session goes on), and issue 40's four escapes of the
// allow-list are refused as outside it.
func TestMCPHardening(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "deep", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "deep", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":` + hardNested(900) + `}}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(hs.Close)
	allowed := hs.URL + "/mcp"
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"), "--mcp-allowed-urls", allowed)
	c := dialResume(t, "ws://"+s.addr+"/v1/realtime")
	require.Equal(t, "session.created", c.next(t, 10*time.Second)["type"])
	errField := func(ev map[string]any, k string) any { return ev["error"].(map[string]any)[k] }

	for _, esc := range []string{"/%2e%2e/admin", "/.%2E/admin", "/..%2fadmin", `/..\admin`} {
		c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"tools": []any{
			map[string]any{"type": "mcp", "server_label": "esc", "server_url": allowed + esc}}}})
		e := c.next(t, 10*time.Second)
		require.Equal(t, "error", e["type"], "%s: %v", esc, e)
		require.Equal(t, "mcp_server_not_allowed", errField(e, "code"), esc)
		require.Equal(t, "session.tools[0].server_url", errField(e, "param"), esc)
	}

	cpu0, start := procCPU(t, s.cmd.Process.Pid), time.Now()
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"tools": []any{
		map[string]any{"type": "mcp", "server_label": "deep", "server_url": allowed}}}})
	var failed bool
	for !failed {
		ev := c.next(t, 30*time.Second)
		switch ev["type"] {
		case "mcp_list_tools.failed":
			failed = true
		case "mcp_list_tools.completed":
			t.Fatalf("a 900-level schema was listed: %v", ev)
		}
	}
	t.Logf("900-level MCP schema: listing failed in %s, server CPU %s", time.Since(start).Round(time.Millisecond), procCPU(t, s.cmd.Process.Pid)-cpu0)
	e := c.next(t, 10*time.Second)
	require.Equal(t, "mcp_list_tools_failed", errField(e, "code"), "%v", e)
	require.Contains(t, errField(e, "message"), "nested deeper than 64")
	requireServes(t, s)
}

// TestClientSecretMemoryReturns mints 10,000 keys of 10 s, the store's cap (the next is a 429),
// and checks that the memory they hold comes back within 30 s of their expiry (issue 40's
// criterion: RSS within 10 % of its baseline): the pruner drops them on its timer, without a
// mint or a lookup, and hands the memory back.
func TestClientSecretMemoryReturns(t *testing.T) {
	if testing.Short() {
		t.Skip("about 40 s")
	}
	t.Parallel()
	debugAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"), "--debug-addr", debugAddr)
	base := "http://" + s.addr
	// liveHeap is the heap in use right after a full GC (the profiler's gc=1): what the server
	// holds, not the garbage it happens to carry between collections, which swings by 15 MiB.
	liveHeap := func() float64 {
		resp, err := http.Get("http://" + debugAddr + "/debug/pprof/heap?gc=1") //nolint:noctx // bounded by the server under test
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return metricValue(t, s, "go_memstats_heap_inuse_bytes")
	}
	pid := s.cmd.Process.Pid
	const keys = 10000
	body := `{"expires_after":{"anchor":"created_at","seconds":10},"session":{"type":"realtime","instructions":"` + strings.Repeat("Be brief. ", 100) + `"}}`
	mint := func() int {
		resp, err := http.Post(base+"/v1/realtime/client_secrets", "application/json", strings.NewReader(body)) //nolint:noctx // bounded by the server under test
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, mint())
	// The baseline is the warm server's: the recognizers' warm-up, which runs after ready,
	// allocates native and Go memory of its own that must not count as the keys'.
	require.Eventually(t, func() bool { return strings.Contains(s.logs.String(), "asr warm-up done") },
		time.Minute, 50*time.Millisecond, "the server warms up")
	rss0, err := readRSSKiB(pid)
	require.NoError(t, err)
	heap0 := liveHeap()
	start := time.Now()
	var wg sync.WaitGroup
	var refused atomic.Int32
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < keys-1; i += 8 {
				if mint() != http.StatusOK {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.Zero(t, refused.Load())
	require.Equal(t, http.StatusTooManyRequests, mint(), "the store holds 10,000 live keys")
	minted := time.Since(start)
	rss1, err := readRSSKiB(pid)
	require.NoError(t, err)
	heap1 := metricValue(t, s, "go_memstats_heap_inuse_bytes")
	time.Sleep(10*time.Second - minted + 30*time.Second) // every key expired 30 s ago
	rss2, err := readRSSKiB(pid)                         // as the server left it: nothing but its own pruner collected
	require.NoError(t, err)
	heap2 := liveHeap()
	t.Logf("10,000 keys minted in %s: RSS %d → %d → %d MiB, heap in use %.0f → %.0f → %.0f MiB (before, minted, 30 s after expiry; before and after: live, after a GC)",
		minted.Round(time.Millisecond), rss0>>10, rss1>>10, rss2>>10, heap0/(1<<20), heap1/(1<<20), heap2/(1<<20))
	require.Less(t, rss2, rss0*11/10, "RSS is back within 10 % of its baseline")
	require.Less(t, heap2, heap0*1.1+1<<20, "the expired keys' heap came back: nothing holds them")
	require.Equal(t, http.StatusOK, mint(), "their places are free again")
}
