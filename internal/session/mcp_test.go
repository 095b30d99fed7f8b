package session

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/mcpclient"
)

// hungMCPServer accepts requests and never answers them until the client gives up: a server
// that stalls mid-handshake. It reads the body first: net/http notices a client's disconnect
// (and cancels the request's context) only once the body has been read.
func hungMCPServer(t *testing.T) string {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

func mcpSession(t *testing.T, allowed string) (*Session, *sink, func() string) {
	t.Helper()
	allow, err := mcpclient.ParseAllowList([]string{allowed})
	require.NoError(t, err)
	m := NewManager(ManagerConfig{MaxSessions: 1, MCPAllowList: allow}, &fakeBackend{&fakeEngine{}}, zap.NewNop())
	sk := &sink{ch: make(chan Event, 1024)}
	s, wait := runSession(t, m, Options{Duplex: true}, sk, manual16k)
	return s, sk, wait
}

// A session that ends while a listing is stuck on a hung server ends at once: the listing is
// cancelled and its goroutine waited for (TestMain's leak check).
func TestMCPListingCancelledAtClose(t *testing.T) {
	url := hungMCPServer(t)
	s, sk, wait := mcpSession(t, url)
	require.NoError(t, s.Submit(context.Background(), &UpdateSession{Patch: ConfigPatch{ToolsSet: true,
		MCPTools: []MCPTool{{ServerLabel: "hung", ServerURL: url}}}}))
	sk.until(t, "mcp_list_tools.in_progress")
	start := time.Now()
	s.Stop(ReasonClientClose)
	require.Equal(t, ReasonClientClose, wait())
	require.Less(t, time.Since(start), 2*time.Second)
}

// A tool removed while it is being listed reports its item failed, with an error saying why,
// and the session goes on.
func TestMCPListingReplaced(t *testing.T) {
	url := hungMCPServer(t)
	s, sk, wait := mcpSession(t, url)
	require.NoError(t, s.Submit(context.Background(), &UpdateSession{Patch: ConfigPatch{ToolsSet: true,
		MCPTools: []MCPTool{{ServerLabel: "hung", ServerURL: url}}}}))
	inProgress := sk.until(t, "mcp_list_tools.in_progress")
	require.NoError(t, s.Submit(context.Background(), &UpdateSession{Patch: ConfigPatch{ToolsSet: true}}))
	failed := sk.until(t, "mcp_list_tools.failed")
	require.Equal(t, inProgress.wire()["item_id"], failed.wire()["item_id"])
	e := sk.until(t, "error")
	require.Equal(t, "mcp_list_tools_failed", e.wire()["error"].(map[string]any)["code"])
	require.True(t, strings.Contains(e.wire()["error"].(map[string]any)["message"].(string), "replaced or removed"))
	s.Stop(ReasonClientClose)
	require.Equal(t, ReasonClientClose, wait())
}
