package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConsoleIsPublic: the console page loads without the API key; the API behind it does not.
func TestConsoleIsPublic(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, RouterDeps{APIKey: "sekrit", Ready: func() bool { return true }})
	code, hdr, body := do(t, http.MethodGet, srv.URL+"/", nil, "")
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.HasPrefix(hdr.Get("Content-Type"), "text/html"), hdr.Get("Content-Type"))
	require.Contains(t, string(body), "omniserve console")
	code, _, _ = do(t, http.MethodGet, srv.URL+"/console/app.js", nil, "")
	require.Equal(t, http.StatusOK, code)
	code, _, _ = do(t, http.MethodGet, srv.URL+"/v1/models", nil, "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _, body = do(t, http.MethodGet, srv.URL+"/nope", nil, "")
	require.Equal(t, http.StatusNotFound, code)
	requireOpenAIError(t, body, "invalid_request_error", "not_found")
}
