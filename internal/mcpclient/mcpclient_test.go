package mcpclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/jsonbound"
	"github.com/omniserve/omniserve/internal/mcpclient"
)

// server is a real MCP server on loopback, written with the same SDK.
type server struct {
	url     string
	mu      sync.Mutex
	headers []http.Header
}

func (s *server) seen() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.headers...)
}

type addIn struct {
	A int `json:"a"`
	B int `json:"b"`
}

func newServer(t *testing.T) *server {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "add", Description: "adds two integers"},
		func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: jsonInt(in.A + in.B)}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "echoes its text", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in struct {
			Text string `json:"text"`
		}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "fail", Description: "always fails"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New("the disk is on fire")
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "big", Description: "a large answer", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", 64<<10)}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "slow", Description: "answers after its caller gave up"},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "late"}}}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	s := &server{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.headers = append(s.headers, r.Header.Clone())
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	s.url = hs.URL + "/mcp"
	return s
}

func jsonInt(n int) string { b, _ := json.Marshal(n); return string(b) }

func testLimits() mcpclient.Limits {
	l := mcpclient.DefaultLimits()
	l.ConnectTimeout, l.ListTimeout, l.CallTimeout = 5*time.Second, 5*time.Second, 5*time.Second
	return l
}

func connect(t *testing.T, srv mcpclient.Server, lim mcpclient.Limits) *mcpclient.Conn {
	t.Helper()
	c, err := mcpclient.Connect(context.Background(), srv, lim)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

func names(tools []mcpclient.Tool) []string {
	var out []string
	for _, t := range tools {
		out = append(out, t.Name)
	}
	return out
}

func TestListTools(t *testing.T) {
	s := newServer(t)
	c := connect(t, mcpclient.Server{URL: s.url}, testLimits())
	tools, err := c.ListTools(context.Background(), nil)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"add", "echo", "fail", "big", "slow"}, names(tools))
	for _, tool := range tools {
		if tool.Name != "add" {
			continue
		}
		require.Equal(t, "adds two integers", tool.Description)
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
		}
		require.NoError(t, json.Unmarshal(tool.InputSchema, &schema))
		require.Equal(t, "object", schema.Type)
		require.Contains(t, schema.Properties, "a")
		require.Contains(t, schema.Properties, "b")
	}
}

func TestAllowedToolsFilter(t *testing.T) {
	s := newServer(t)
	c := connect(t, mcpclient.Server{URL: s.url}, testLimits())
	for _, tc := range []struct {
		name, filter string
		want         []string
	}{
		{"absent", ``, []string{"add", "echo", "fail", "big", "slow"}},
		{"null", `null`, []string{"add", "echo", "fail", "big", "slow"}},
		{"array", `["add","nope"]`, []string{"add"}},
		{"empty array", `[]`, nil},
		{"tool_names", `{"tool_names":["echo","fail"]}`, []string{"echo", "fail"}},
		{"read_only", `{"read_only":true}`, []string{"echo", "big"}},
		{"both", `{"tool_names":["echo","add"],"read_only":true}`, []string{"echo"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := mcpclient.ParseFilter(json.RawMessage(tc.filter))
			require.NoError(t, err)
			tools, err := c.ListTools(context.Background(), f)
			require.NoError(t, err)
			require.ElementsMatch(t, tc.want, names(tools))
		})
	}
}

func TestParseFilterRejects(t *testing.T) {
	for _, bad := range []string{`"add"`, `[1]`, `{"tool_name":["x"]}`, `{"read_only":"yes"}`} {
		_, err := mcpclient.ParseFilter(json.RawMessage(bad))
		require.Error(t, err, bad)
	}
}

func TestCall(t *testing.T) {
	s := newServer(t)
	c := connect(t, mcpclient.Server{URL: s.url}, testLimits())
	out, err := c.Call(context.Background(), "add", json.RawMessage(`{"a":2,"b":40}`))
	require.NoError(t, err)
	require.Equal(t, "42", out)
	out, err = c.Call(context.Background(), "echo", json.RawMessage(`{"text":"héllo"}`))
	require.NoError(t, err)
	require.Equal(t, "héllo", out)
}

func TestCallErrors(t *testing.T) {
	s := newServer(t)
	lim := testLimits()
	lim.CallTimeout = 300 * time.Millisecond
	lim.MaxResponseBytes = 16 << 10
	c := connect(t, mcpclient.Server{URL: s.url}, lim)
	for _, tc := range []struct {
		name, tool, args, kind, msg string
	}{
		{"tool error", "fail", `{}`, mcpclient.KindTool, "the disk is on fire"},
		{"unknown tool", "nope", `{}`, mcpclient.KindProtocol, "nope"},
		{"bad arguments", "add", `[1,2]`, mcpclient.KindProtocol, "not a JSON object"},
		{"schema mismatch", "add", `{"a":"two"}`, mcpclient.KindTool, ""},
		{"oversize response", "big", `{}`, mcpclient.KindProtocol, "too large"},
		{"timeout", "slow", `{}`, mcpclient.KindHTTP, "timed out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := c.Call(context.Background(), tc.tool, json.RawMessage(tc.args))
			var me *mcpclient.Error
			require.ErrorAs(t, err, &me, "%v", err)
			require.Equal(t, tc.kind, me.Kind, me.Message)
			require.Contains(t, me.Message, tc.msg)
			require.Less(t, time.Since(start), 3*time.Second)
		})
	}
	// Whatever failed before, the connection still serves calls.
	out, err := c.Call(context.Background(), "add", json.RawMessage(`{"a":1,"b":1}`))
	require.NoError(t, err)
	require.Equal(t, "2", out)
}

func TestHeadersAndAuthorization(t *testing.T) {
	s := newServer(t)
	c := connect(t, mcpclient.Server{
		URL:           s.url,
		Headers:       map[string]string{"X-Tenant": "acme", "Authorization": "Basic overridden"},
		Authorization: "tok-123",
	}, testLimits())
	_, err := c.ListTools(context.Background(), nil)
	require.NoError(t, err)
	seen := s.seen()
	require.NotEmpty(t, seen)
	for _, h := range seen {
		require.Equal(t, "acme", h.Get("X-Tenant"))
		require.Equal(t, "Bearer tok-123", h.Get("Authorization"))
	}
}

func TestDeadURL(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	dead := hs.URL + "/mcp"
	hs.Close()
	start := time.Now()
	_, err := mcpclient.Connect(context.Background(), mcpclient.Server{URL: dead, Authorization: "secret-token"}, testLimits())
	var me *mcpclient.Error
	require.ErrorAs(t, err, &me)
	require.Equal(t, mcpclient.KindProtocol, me.Kind)
	require.Contains(t, me.Message, "connect")
	require.NotContains(t, me.Message, "secret-token")
	require.Less(t, time.Since(start), 3*time.Second)
}

func TestHTTPErrorStatus(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	defer hs.Close()
	_, err := mcpclient.Connect(context.Background(), mcpclient.Server{URL: hs.URL}, testLimits())
	var me *mcpclient.Error
	require.ErrorAs(t, err, &me)
	require.Equal(t, mcpclient.KindHTTP, me.Kind)
	require.Equal(t, http.StatusUnauthorized, me.Code)
}

func TestRedirectNotFollowed(t *testing.T) {
	s := newServer(t)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, s.url, http.StatusTemporaryRedirect)
	}))
	defer hs.Close()
	_, err := mcpclient.Connect(context.Background(), mcpclient.Server{URL: hs.URL}, testLimits())
	require.Error(t, err)
	require.Empty(t, s.seen(), "the redirect target must not be contacted")
}

func TestAllowList(t *testing.T) {
	a, err := mcpclient.ParseAllowList([]string{"http://127.0.0.1:8931/mcp", " https://tools.example.com/ ", ""})
	require.NoError(t, err)
	require.Equal(t, 2, a.Len())
	for _, tc := range []struct {
		url  string
		want bool
	}{
		{"http://127.0.0.1:8931/mcp", true},
		{"http://127.0.0.1:8931/mcp/", true},
		{"http://127.0.0.1:8931/mcp/v2?x=1", true},
		{"http://127.0.0.1:8931/mcpevil", false},
		{"http://127.0.0.1:8931/", false},
		{"http://127.0.0.1:89311/mcp", false},
		{"https://127.0.0.1:8931/mcp", false},
		{"http://user@127.0.0.1:8931/mcp", false},
		{"http://127.0.0.1:8931/mcp/../admin", false},
		// Issue 40's escapes: each reaches /admin behind a decoding, normalising proxy.
		{"http://127.0.0.1:8931/mcp/%2e%2e/admin", false},
		{"http://127.0.0.1:8931/mcp/.%2E/admin", false},
		{"http://127.0.0.1:8931/mcp/..%2fadmin", false},
		{`http://127.0.0.1:8931/mcp/..\admin`, false},
		{"http://127.0.0.1:8931/mcp/%2E%2E%2Fadmin", false},
		{"http://127.0.0.1:8931/mcp/..%5cadmin", false},
		{"http://127.0.0.1:8931/mcp/./x", false},
		{"http://127.0.0.1:8931/mcp/x/..", false},
		{"http://127.0.0.1:8931/mcp/a%20b", true}, // other escapes are the path as written
		{"http://127.0.0.1:8931/mcp/v1.2/x..y", true},
		{"https://tools.example.com/anything", true},
		{"https://TOOLS.example.com/x", true},
		{"https://tools.example.com.evil.org/x", false},
		{"ftp://tools.example.com/x", false},
		{"not a url", false},
	} {
		require.Equal(t, tc.want, a.Permits(tc.url), tc.url)
	}
	var empty mcpclient.AllowList
	require.False(t, empty.Permits("http://127.0.0.1:8931/mcp"))
	_, err = mcpclient.ParseAllowList([]string{"127.0.0.1:8931"})
	require.Error(t, err)
}

// schemaServer is a real MCP server listing one tool whose input schema is schema.
func schemaServer(t testing.TB, schema json.RawMessage) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "deep", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

func nestedParams(n int) string {
	return strings.Repeat(`{"type":"object","properties":{"a":`, n) + `{"type":"string"}` + strings.Repeat("}}", n)
}

// listSchema lists schemaServer's tools.
func listSchema(t testing.TB, schema string) ([]mcpclient.Tool, error) {
	t.Helper()
	c, err := mcpclient.Connect(context.Background(), mcpclient.Server{URL: schemaServer(t, json.RawMessage(schema))}, testLimits())
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	return c.ListTools(context.Background(), nil)
}

// A server's tool schema over jsonbound.Schema fails the listing (protocol_error) before it
// can reach the grammar walk.
func TestListToolsSchemaBound(t *testing.T) {
	t.Parallel()
	_, err := listSchema(t, nestedParams(40)) // 81 levels of objects
	var me *mcpclient.Error
	require.ErrorAs(t, err, &me)
	require.Equal(t, mcpclient.KindProtocol, me.Kind)
	require.Contains(t, me.Message, "nested deeper than 64")
	tools, err := listSchema(t, nestedParams(5))
	require.NoError(t, err)
	require.Len(t, tools, 1)
}

// FuzzListToolsSchema lists a tool whose schema's one property is the fuzzed document: the
// listing never crashes, and a schema over the bound never comes back.
func FuzzListToolsSchema(f *testing.F) {
	for _, s := range []string{`{"type":"string"}`, nestedParams(3), nestedParams(40), `[[[[[[1]]]]]]`, `{"a":"[[[["}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, prop string) {
		if !json.Valid([]byte(prop)) {
			t.Skip("the server's SDK refuses to list what is not JSON")
		}
		schema := `{"type":"object","properties":{"a":` + prop + `}}`
		tools, err := listSchema(t, schema)
		if err != nil {
			return
		}
		for _, tool := range tools {
			require.NoError(t, jsonbound.Check(tool.InputSchema, jsonbound.Schema))
		}
	})
}
