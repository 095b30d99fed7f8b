package test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// mcpTestServer is a real MCP server on loopback, written with the official Go SDK, that
// records the headers of every request it gets.
type mcpTestServer struct {
	url     string
	mu      sync.Mutex
	headers []http.Header
	calls   map[string]int // tools/call count by tool
	// hung is signalled when a call of "hang" starts; that call answers only when the
	// server dies (kill).
	hung chan struct{}
	kill func()
}

func (s *mcpTestServer) called(tool string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[tool]
}

func (s *mcpTestServer) count(tool string) {
	s.mu.Lock()
	s.calls[tool]++
	s.mu.Unlock()
}

func (s *mcpTestServer) seen() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.headers...)
}

func startMCPServer(t *testing.T) *mcpTestServer {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "omniserve-test", Version: "1"}, nil)
	s := &mcpTestServer{calls: map[string]int{}, hung: make(chan struct{}, 1)}
	release := make(chan struct{}) // closed by kill: a stateless server's Close waits for its handlers
	type addIn struct {
		A int `json:"a"`
		B int `json:"b"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "add", Description: "adds two integers"},
		func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, any, error) {
			s.count("add")
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "sum=" + strconv.Itoa(in.A+in.B)}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "echoes its text", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct {
			Text string `json:"text"`
		}) (*mcp.CallToolResult, any, error) {
			s.count("echo")
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo:" + in.Text}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "delete_all", Description: "deletes everything"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			s.count("delete_all")
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "gone"}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "hang", Description: "never answers"},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			s.count("hang")
			select {
			case s.hung <- struct{}{}:
			default:
			}
			select { // the server dies under it
			case <-ctx.Done():
			case <-release:
			}
			return nil, nil, errors.New("server gone")
		})
	// Stateless: no server session outlives its request, so nothing is left running when the
	// test ends, whatever the client did.
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.headers = append(s.headers, r.Header.Clone())
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	s.url = hs.URL + "/mcp"
	var once sync.Once
	s.kill = func() {
		once.Do(func() {
			hs.CloseClientConnections() // the call in flight loses its connection
			close(release)
			hs.Close()
		})
	}
	t.Cleanup(s.kill)
	return s
}

// TestRealtimeMCPListTools drives MCP tool discovery on the binary with an MCP server on
// loopback: two servers listed through allowed_tools (names, read_only), the documented event
// sequence and item, headers and authorization sent but never echoed or logged, a server_url
// outside --mcp-allowed-urls refused with its param, and a dead URL reported as
// mcp_list_tools.failed plus an error event while the session goes on answering.
func TestRealtimeMCPListTools(t *testing.T) {
	ms := startMCPServer(t) // first: its cleanup runs after the binary's
	deadSrv := httptest.NewServer(http.NotFoundHandler())
	dead := deadSrv.URL + "/mcp"
	deadSrv.Close()
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--log-format", "json",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"), "--mcp-allowed-urls", ms.url+","+dead)
	c := dialResume(t, "ws://"+s.addr+"/v1/realtime")
	require.Equal(t, "session.created", c.next(t, 10*time.Second)["type"])
	errField := func(ev map[string]any, k string) any { return ev["error"].(map[string]any)[k] }

	const token = "tok-secret-42"
	start := time.Now()
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "tools": []any{
		map[string]any{"type": "mcp", "server_label": "calc", "server_url": ms.url, "headers": map[string]any{"X-Tenant": "acme-tenant"},
			"authorization": token, "allowed_tools": []any{"add", "echo"}, "require_approval": "never"},
		map[string]any{"type": "mcp", "server_label": "ro", "server_url": ms.url, "allowed_tools": map[string]any{"read_only": true}},
	}}})
	upd := c.next(t, 10*time.Second)
	require.Equal(t, "session.updated", upd["type"], "%v", upd)
	tools := upd["session"].(map[string]any)["tools"].([]any)
	require.Len(t, tools, 2)
	calc := tools[0].(map[string]any)
	require.Equal(t, "mcp", calc["type"])
	require.Equal(t, "calc", calc["server_label"])
	require.NotContains(t, calc, "authorization", "secrets are not echoed")
	require.NotContains(t, calc, "headers", "secrets are not echoed")

	// Per item: added (no tools yet) → in_progress → completed → item.done with the tools.
	order := map[string][]string{}
	listed := map[string][]string{} // server_label → tool names
	labelOf := map[string]string{}
	var schema map[string]any
	for len(listed) < 2 {
		ev := c.next(t, 30*time.Second)
		typ, _ := ev["type"].(string)
		require.NotEqual(t, "error", typ, "%v", ev)
		switch typ {
		case "conversation.item.added", "conversation.item.done":
			it := ev["item"].(map[string]any)
			require.Equal(t, "mcp_list_tools", it["type"])
			id := it["id"].(string)
			labelOf[id] = it["server_label"].(string)
			order[id] = append(order[id], typ)
			if typ == "conversation.item.added" {
				require.Empty(t, it["tools"])
				continue
			}
			var names []string
			for _, x := range it["tools"].([]any) {
				tool := x.(map[string]any)
				names = append(names, tool["name"].(string))
				if tool["name"] == "add" {
					schema = tool["input_schema"].(map[string]any)
					require.Equal(t, "adds two integers", tool["description"])
				}
			}
			sort.Strings(names)
			listed[labelOf[id]] = names
		case "mcp_list_tools.in_progress", "mcp_list_tools.completed":
			id := ev["item_id"].(string)
			order[id] = append(order[id], typ)
		default:
			t.Fatalf("unexpected event %v", ev)
		}
	}
	t.Logf("two MCP servers listed %v after session.update (loopback)", time.Since(start).Round(100*time.Microsecond))
	require.Equal(t, map[string][]string{"calc": {"add", "echo"}, "ro": {"echo"}}, listed)
	require.Equal(t, "object", schema["type"])
	require.Contains(t, schema["properties"], "a")
	for id, seq := range order {
		require.Equal(t, []string{"conversation.item.added", "mcp_list_tools.in_progress", "mcp_list_tools.completed", "conversation.item.done"}, seq, id)
	}
	var calcItem string
	for id, l := range labelOf {
		if l == "calc" {
			calcItem = id
		}
	}
	c.send(t, map[string]any{"type": "conversation.item.retrieve", "item_id": calcItem})
	ret := c.next(t, 10*time.Second)
	require.Equal(t, "conversation.item.retrieved", ret["type"], "%v", ret)
	require.Len(t, ret["item"].(map[string]any)["tools"], 2)

	// The headers and the token reached the server on the calc connection.
	var withToken int
	for _, h := range ms.seen() {
		if h.Get("Authorization") == "Bearer "+token {
			withToken++
			require.Equal(t, "acme-tenant", h.Get("X-Tenant"))
		}
	}
	require.Positive(t, withToken)

	// Repeating a tool unchanged does not list it again: the retrieve's error comes right after
	// session.updated (a listing would put its item and in_progress between them). Changing
	// allowed_tools lists it again, as a new item.
	calcTool := map[string]any{"type": "mcp", "server_label": "calc", "server_url": ms.url, "headers": map[string]any{"X-Tenant": "acme-tenant"},
		"authorization": token, "allowed_tools": []any{"add", "echo"}, "require_approval": "never"}
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"instructions": "Be brief.", "tools": []any{calcTool}}})
	require.Equal(t, "session.updated", c.next(t, 10*time.Second)["type"])
	c.send(t, map[string]any{"type": "conversation.item.retrieve", "item_id": "item_nope"})
	e := c.next(t, 10*time.Second)
	require.Equal(t, "error", e["type"], "%v", e)
	require.Equal(t, "item_retrieve_invalid_item_id", errField(e, "code"))
	calcTool["allowed_tools"] = map[string]any{"tool_names": []any{"add", "delete_all"}}
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"tools": []any{calcTool}}})
	require.Equal(t, "session.updated", c.next(t, 10*time.Second)["type"])
	relisted := c.next(t, 10*time.Second)
	require.Equal(t, "conversation.item.added", relisted["type"], "%v", relisted)
	require.NotEqual(t, calcItem, relisted["item"].(map[string]any)["id"])
	require.Equal(t, "mcp_list_tools.in_progress", c.next(t, 10*time.Second)["type"])
	require.Equal(t, "mcp_list_tools.completed", c.next(t, 30*time.Second)["type"])
	done := c.next(t, 10*time.Second)
	require.Equal(t, "conversation.item.done", done["type"], "%v", done)
	require.Len(t, done["item"].(map[string]any)["tools"], 2)

	// A server_url outside the allow-list: refused with its param, nothing changes.
	c.send(t, map[string]any{"type": "session.update", "event_id": "ev_ssrf", "session": map[string]any{"tools": []any{
		map[string]any{"type": "mcp", "server_label": "meta", "server_url": "http://169.254.169.254/latest"}}}})
	e = c.next(t, 10*time.Second)
	require.Equal(t, "error", e["type"], "%v", e)
	require.Equal(t, "mcp_server_not_allowed", errField(e, "code"))
	require.Equal(t, "session.tools[0].server_url", errField(e, "param"))
	require.Equal(t, "ev_ssrf", errField(e, "event_id"))

	// A dead URL inside the allow-list: the session is updated, the listing fails with an error
	// event saying why, and the session still answers.
	deadStart := time.Now()
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"tools": []any{
		map[string]any{"type": "mcp", "server_label": "dead", "server_url": dead, "authorization": token}}}})
	require.Equal(t, "session.updated", c.next(t, 10*time.Second)["type"])
	added := c.next(t, 10*time.Second)
	require.Equal(t, "conversation.item.added", added["type"], "%v", added)
	deadItem := added["item"].(map[string]any)["id"]
	require.Equal(t, "mcp_list_tools.in_progress", c.next(t, 10*time.Second)["type"])
	failed := c.next(t, 30*time.Second)
	t.Logf("dead URL reported failed %v after session.update", time.Since(deadStart).Round(100*time.Microsecond))
	require.Equal(t, "mcp_list_tools.failed", failed["type"], "%v", failed)
	require.Equal(t, deadItem, failed["item_id"])
	e = c.next(t, 10*time.Second)
	require.Equal(t, "error", e["type"], "%v", e)
	require.Equal(t, "mcp_list_tools_failed", errField(e, "code"))
	require.Equal(t, "session.tools[0].server_url", errField(e, "param"))
	require.Contains(t, errField(e, "message"), `"dead"`)
	require.NotContains(t, errField(e, "message"), token)

	c.send(t, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": "Hello there."}}}})
	c.send(t, map[string]any{"type": "response.create", "response": map[string]any{"output_modalities": []any{"text"}, "max_output_tokens": 8}})
	for {
		ev := c.next(t, 60*time.Second)
		require.NotEqual(t, "error", ev["type"], "%v", ev)
		if ev["type"] == "response.done" {
			// The dummy model rarely stops within 8 tokens: incomplete (max_output_tokens) is an
			// answer too; what matters is that the session produced one.
			resp := ev["response"].(map[string]any)
			require.Contains(t, []any{"completed", "incomplete"}, resp["status"], "%v", ev)
			require.NotEmpty(t, resp["output"], "%v", ev)
			break
		}
	}
	logs := s.logs.String()
	require.NotContains(t, logs, token, "the token is never logged")
	require.NotContains(t, logs, "acme-tenant", "headers are never logged")
	require.True(t, strings.Contains(logs, "mcp list tools failed"), "the failure is logged")
}
