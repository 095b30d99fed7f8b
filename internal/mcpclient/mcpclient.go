// Package mcpclient is omniserve's client for remote MCP servers (the
// Realtime API's `type: "mcp"` tools): it connects over streamable HTTP with
// the official Go SDK, lists a server's tools through the session's
// allowed_tools filter and calls them, every step under a timeout and every
// response under a size bound. It never logs: headers and tokens it carries
// are a client's secrets.
package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/omniserve/omniserve/internal/jsonbound"
)

// Limits bound what one MCP server may cost a session.
type Limits struct {
	// ConnectTimeout bounds the initialize handshake.
	ConnectTimeout time.Duration
	// ListTimeout bounds listing all tools (every page).
	ListTimeout time.Duration
	// CallTimeout bounds one tools/call.
	CallTimeout time.Duration
	// MaxResponseBytes bounds each HTTP response body from the server.
	MaxResponseBytes int64
	// MaxTools bounds how many tools one listing may return.
	MaxTools int
}

// DefaultLimits are what the realtime server uses.
func DefaultLimits() Limits {
	return Limits{
		ConnectTimeout:   10 * time.Second,
		ListTimeout:      10 * time.Second,
		CallTimeout:      30 * time.Second,
		MaxResponseBytes: 1 << 20,
		MaxTools:         128,
	}
}

// Filter is the Realtime allowed_tools filter: nil means every tool.
type Filter struct {
	// Names, when non-nil, keeps only the tools named.
	Names []string
	// ReadOnly keeps only tools annotated readOnlyHint.
	ReadOnly bool
}

// ParseFilter decodes allowed_tools in either of its documented forms: an
// array of names, or {"tool_names": [...], "read_only": bool}. JSON null or
// an absent field yields nil (every tool).
func ParseFilter(raw json.RawMessage) (*Filter, error) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return nil, nil
	}
	if strings.HasPrefix(s, "[") {
		var names []string
		if err := json.Unmarshal(raw, &names); err != nil {
			return nil, fmt.Errorf("allowed_tools: an array must hold tool names: %w", err)
		}
		return &Filter{Names: nonNil(names)}, nil
	}
	var obj struct {
		ToolNames *[]string `json:"tool_names"`
		ReadOnly  bool      `json:"read_only"`
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("allowed_tools: want an array of names or {tool_names, read_only}: %w", err)
	}
	f := &Filter{ReadOnly: obj.ReadOnly}
	if obj.ToolNames != nil {
		f.Names = nonNil(*obj.ToolNames)
	}
	return f, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Allows reports whether the filter keeps the tool.
func (f *Filter) Allows(name string, readOnly bool) bool {
	if f == nil {
		return true
	}
	if f.ReadOnly && !readOnly {
		return false
	}
	if f.Names == nil {
		return true
	}
	for _, n := range f.Names {
		if n == name {
			return true
		}
	}
	return false
}

// Server is one `type: "mcp"` tool's connection settings.
type Server struct {
	URL string
	// Headers are sent on every request; never logged.
	Headers map[string]string
	// Authorization is an OAuth access token sent as a Bearer credential
	// (it overrides an Authorization header); never logged.
	Authorization string
}

// Tool is one listed tool, in the shape of the Realtime mcp_list_tools item.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
	Annotations json.RawMessage `json:"annotations,omitempty"`
}

// Error kinds, as the Realtime mcp_call item's error.type spells them.
const (
	KindProtocol = "protocol_error"
	KindTool     = "tool_execution_error"
	KindHTTP     = "http_error"
)

// Error is a failed MCP step, classified for the mcp_call item.
type Error struct {
	Kind string
	// Code is the HTTP status for http_error, else 0.
	Code    int
	Message string
	Err     error
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Err }

// Conn is one connected MCP server. Methods are safe for concurrent use.
type Conn struct {
	lim     Limits
	session *mcp.ClientSession
}

// Connect performs the MCP initialize handshake with the server. ctx bounds the connection's
// whole life, not only the handshake: once it is done every request the connection makes fails
// at once, including those the SDK makes on its own without a deadline (the cancellation notice
// after an interrupted handshake, the DELETE at Close), so a stalled server cannot hold the
// owner's shutdown.
func Connect(ctx context.Context, srv Server, lim Limits) (*Conn, error) {
	tr := &limitTransport{base: http.DefaultTransport, headers: srv.Headers, limit: lim.MaxResponseBytes, life: ctx}
	if srv.Authorization != "" {
		tr.auth = "Bearer " + srv.Authorization
	}
	hc := &http.Client{
		Transport: tr,
		// Every step has its own deadline; this bounds the requests the SDK makes without
		// one (the DELETE that ends the session at Close), so a stalled server cannot hold a
		// realtime session's shutdown.
		Timeout: max(lim.ConnectTimeout, lim.ListTimeout, lim.CallTimeout),
		// A redirect would take the request to a URL the operator's
		// allow-list never saw.
		CheckRedirect: func(*http.Request, []*http.Request) error { return errRedirect },
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "omniserve", Version: "1"}, nil)
	transport := &mcp.StreamableClientTransport{
		Endpoint:   srv.URL,
		HTTPClient: hc,
		// A broken stream is a failed step, not something to retry under the
		// session's feet; server-initiated messages are not used.
		MaxRetries:           -1,
		DisableStandaloneSSE: true,
		MaxEventSize:         int(lim.MaxResponseBytes),
	}
	cctx, cancel := withTimeout(ctx, lim.ConnectTimeout)
	defer cancel()
	cs, err := client.Connect(cctx, transport, nil)
	if err != nil {
		return nil, classify("connect", cctx, err)
	}
	return &Conn{lim: lim, session: cs}, nil
}

// Close ends the MCP session and waits for its goroutines.
func (c *Conn) Close() error {
	if err := c.session.Close(); err != nil {
		return fmt.Errorf("mcp close: %w", err)
	}
	return nil
}

// ListTools lists every tool the filter keeps, across all pages.
func (c *Conn) ListTools(ctx context.Context, f *Filter) ([]Tool, error) {
	lctx, cancel := withTimeout(ctx, c.lim.ListTimeout)
	defer cancel()
	over := new(atomic.Bool)
	lctx = context.WithValue(lctx, oversizeKey{}, over)
	var out []Tool
	seen := 0
	for t, err := range c.session.Tools(lctx, nil) {
		if err != nil {
			if over.Load() {
				err = fmt.Errorf("%w: %w", errTooLarge, err)
			}
			return nil, classify("tools/list", lctx, err)
		}
		seen++
		if c.lim.MaxTools > 0 && seen > c.lim.MaxTools {
			return nil, &Error{Kind: KindProtocol, Message: fmt.Sprintf("mcp tools/list: the server lists more than %d tools", c.lim.MaxTools)}
		}
		readOnly := t.Annotations != nil && t.Annotations.ReadOnlyHint
		if !f.Allows(t.Name, readOnly) {
			continue
		}
		tool := Tool{Name: t.Name, Description: t.Description}
		if tool.InputSchema, err = marshalOr(t.InputSchema, `{"type":"object"}`); err != nil {
			return nil, &Error{Kind: KindProtocol, Message: "mcp tools/list: tool " + t.Name + ": bad input schema", Err: err}
		}
		// The schema becomes a grammar (a recursive walk, then the engine's sampler): a
		// server's schema is held to the bound a client's is.
		if err := jsonbound.Check(tool.InputSchema, jsonbound.Schema); err != nil {
			return nil, &Error{Kind: KindProtocol, Message: "mcp tools/list: tool " + t.Name + ": input schema: " + err.Error(), Err: err}
		}
		if t.Annotations != nil {
			if tool.Annotations, err = json.Marshal(t.Annotations); err != nil {
				return nil, &Error{Kind: KindProtocol, Message: "mcp tools/list: tool " + t.Name + ": bad annotations", Err: err}
			}
		}
		out = append(out, tool)
	}
	if out == nil {
		out = []Tool{}
	}
	return out, nil
}

func marshalOr(v any, dflt string) (json.RawMessage, error) {
	if v == nil {
		return json.RawMessage(dflt), nil
	}
	return json.Marshal(v)
}

// Call runs one tool with JSON arguments (an object, or empty for none) and
// returns its text output. A tool that reports isError comes back as an
// *Error of kind tool_execution_error carrying the tool's text.
func (c *Conn) Call(ctx context.Context, name string, args json.RawMessage) (string, error) {
	var a map[string]any
	if s := strings.TrimSpace(string(args)); s != "" {
		if err := json.Unmarshal(args, &a); err != nil {
			return "", &Error{Kind: KindProtocol, Message: "mcp tools/call " + name + ": arguments are not a JSON object", Err: err}
		}
	}
	cctx, cancel := withTimeout(ctx, c.lim.CallTimeout)
	defer cancel()
	// The SDK reports a cut-off body as "terminated without response"; the
	// transport marks the call's context so the error can say why.
	over := new(atomic.Bool)
	cctx = context.WithValue(cctx, oversizeKey{}, over)
	res, err := c.session.CallTool(cctx, &mcp.CallToolParams{Name: name, Arguments: a})
	if err != nil {
		if over.Load() {
			err = fmt.Errorf("%w: %w", errTooLarge, err)
		}
		return "", classify("tools/call "+name, cctx, err)
	}
	text, err := resultText(res)
	if err != nil {
		return "", &Error{Kind: KindProtocol, Message: "mcp tools/call " + name + ": " + err.Error(), Err: err}
	}
	if c.lim.MaxResponseBytes > 0 && int64(len(text)) > c.lim.MaxResponseBytes {
		return "", &Error{Kind: KindProtocol, Message: fmt.Sprintf("mcp tools/call %s: output larger than %d bytes", name, c.lim.MaxResponseBytes)}
	}
	if res.IsError {
		return "", &Error{Kind: KindTool, Message: text}
	}
	return text, nil
}

// resultText is the tool's text content concatenated, or the JSON of its
// structured content when it has no text.
func resultText(res *mcp.CallToolResult) (string, error) {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	if b.Len() == 0 && res.StructuredContent != nil {
		j, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return "", fmt.Errorf("structured content: %w", err)
		}
		return string(j), nil
	}
	return b.String(), nil
}

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

var (
	errRedirect = errors.New("redirects are not followed")
	errTooLarge = errors.New("response too large")
)

// classify turns an SDK error into an *Error. Its message names the step and
// the cause, never a header.
func classify(step string, ctx context.Context, err error) error {
	var he *httpStatusError
	switch {
	case errors.As(err, &he):
		return &Error{Kind: KindHTTP, Code: he.code, Message: fmt.Sprintf("mcp %s: server answered HTTP %d", step, he.code), Err: err}
	case errors.Is(err, errTooLarge):
		return &Error{Kind: KindProtocol, Message: fmt.Sprintf("mcp %s: %v", step, errTooLarge), Err: err}
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &Error{Kind: KindHTTP, Message: fmt.Sprintf("mcp %s: timed out", step), Err: err}
	}
	return &Error{Kind: KindProtocol, Message: fmt.Sprintf("mcp %s: %v", step, err), Err: err}
}

// limitTransport adds the tool's headers, bounds every response body and
// remembers HTTP failures so classify can report their status.
type limitTransport struct {
	base    http.RoundTripper
	headers map[string]string
	auth    string
	limit   int64
	life    context.Context // the connection's life (Connect's ctx)
}

type httpStatusError struct{ code int }

func (e *httpStatusError) Error() string { return fmt.Sprintf("HTTP %d", e.code) }

func (t *limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// The request ends with the connection's life as well as its own context; the body's
	// Close releases the link.
	rctx, cancel := context.WithCancel(req.Context())
	unlink := context.AfterFunc(t.life, cancel)
	release := func() { unlink(); cancel() }
	req = req.Clone(rctx)
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	if t.auth != "" {
		req.Header.Set("Authorization", t.auth)
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		release()
		return nil, err
	}
	// The SDK folds a failed status into its own error text; a 4xx/5xx on a
	// POST is answered here so the call fails with the status it got.
	if resp.StatusCode >= 400 && req.Method == http.MethodPost {
		_ = resp.Body.Close()
		release()
		return nil, &httpStatusError{code: resp.StatusCode}
	}
	over, _ := req.Context().Value(oversizeKey{}).(*atomic.Bool)
	left := t.limit
	if left <= 0 {
		left = -1 // no limit
	}
	resp.Body = &limitedBody{rc: resp.Body, left: left, over: over, release: release}
	return resp, nil
}

// oversizeKey marks a step's context with the flag its bodies set when cut.
type oversizeKey struct{}

type limitedBody struct {
	rc      io.ReadCloser
	left    int64 // bytes still allowed; -1: no limit
	over    *atomic.Bool
	release func()
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return b.rc.Read(p)
	}
	if b.left == 0 {
		// One byte more tells a body of exactly the limit from a longer one.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n > 0 {
			if b.over != nil {
				b.over.Store(true)
			}
			return 0, errTooLarge
		}
		return b.rc.Read(p)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error {
	err := b.rc.Close()
	b.release()
	return err
}
