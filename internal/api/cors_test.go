package api

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCORS: what a page on another origin needs to call /v1 with a bearer key, as OpenAI's
// WebRTC guide does: a keyless preflight, the allow header on every answer (401s included, so
// the page reads the JSON error) and Location exposed.
func TestCORS(t *testing.T) {
	t.Parallel()
	const page = "https://app.example.com"
	preflight := func(origin string) http.Header {
		return http.Header{"Origin": {origin}, "Access-Control-Request-Method": {"POST"},
			"Access-Control-Request-Headers": {"authorization,content-type,x-openai-agents-sdk"}}
	}
	tests := []struct {
		name        string
		origins     []string
		method      string
		path        string
		header      http.Header
		wantCode    int
		wantAllow   string // Access-Control-Allow-Origin; "" = absent
		wantErrCode string // OpenAI error code of the body; "" = not checked
	}{
		{"preflight without a key", []string{"*"}, http.MethodOptions, "/v1/realtime/calls", preflight(page), http.StatusNoContent, "*", ""},
		{"preflight, listed origin", []string{page}, http.MethodOptions, "/v1/models", preflight(page), http.StatusNoContent, page, ""},
		{"preflight, other origin", []string{page}, http.MethodOptions, "/v1/models", preflight("https://evil.example"), http.StatusForbidden, "", "origin_not_allowed"},
		{"401 carries the header", []string{"*"}, http.MethodGet, "/v1/models", http.Header{"Origin": {page}}, http.StatusUnauthorized, "*", "invalid_api_key"},
		{"401, listed origin", []string{page}, http.MethodPost, "/v1/chat/completions", http.Header{"Origin": {page}, "Authorization": {"Bearer wrong"}}, http.StatusUnauthorized, page, "invalid_api_key"},
		{"200 with key", []string{"*"}, http.MethodGet, "/v1/models", http.Header{"Origin": {page}, "Authorization": {"Bearer k"}}, http.StatusOK, "*", ""},
		{"404 carries the header", []string{"*"}, http.MethodGet, "/v1/nothing", http.Header{"Origin": {page}, "Authorization": {"Bearer k"}}, http.StatusNotFound, "*", "not_found"},
		{"other origin, not allowed", []string{page}, http.MethodGet, "/v1/models", http.Header{"Origin": {"https://evil.example"}, "Authorization": {"Bearer k"}}, http.StatusOK, "", ""},
		{"CORS off", nil, http.MethodOptions, "/v1/models", preflight(page), http.StatusUnauthorized, "", "invalid_api_key"},
		{"local: localhost, any port", []string{LocalOrigins}, http.MethodOptions, "/v1/realtime/client_secrets", preflight("http://localhost:5173"), http.StatusNoContent, "http://localhost:5173", ""},
		{"local: 127.0.0.1", []string{LocalOrigins}, http.MethodOptions, "/v1/chat/completions", preflight("http://127.0.0.1:3000"), http.StatusNoContent, "http://127.0.0.1:3000", ""},
		{"local: [::1] over https", []string{LocalOrigins}, http.MethodOptions, "/v1/models", preflight("https://[::1]:8443"), http.StatusNoContent, "https://[::1]:8443", ""},
		{"local: evil.example refused", []string{LocalOrigins}, http.MethodOptions, "/v1/realtime/client_secrets", preflight("https://evil.example"), http.StatusForbidden, "", "origin_not_allowed"},
		{"local: a lookalike refused", []string{LocalOrigins}, http.MethodOptions, "/v1/models", preflight("http://localhost.evil.example"), http.StatusForbidden, "", "origin_not_allowed"},
		{"local: a non-http scheme refused", []string{LocalOrigins}, http.MethodOptions, "/v1/models", preflight("chrome-extension://localhost"), http.StatusForbidden, "", "origin_not_allowed"},
		{"local: a lookalike's GET gets no header", []string{LocalOrigins}, http.MethodGet, "/v1/models", http.Header{"Origin": {"http://127.0.0.1.nip.io"}, "Authorization": {"Bearer k"}}, http.StatusOK, "", ""},
		{"no Origin: no headers", []string{"*"}, http.MethodGet, "/v1/models", http.Header{"Authorization": {"Bearer k"}}, http.StatusOK, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newTestServer(t, RouterDeps{APIKey: "k", Models: []string{"dummy"}, CORSOrigins: tt.origins})
			code, h, body := do(t, tt.method, srv.URL+tt.path, tt.header, "")
			require.Equal(t, tt.wantCode, code, string(body))
			require.Equal(t, tt.wantAllow, h.Get("Access-Control-Allow-Origin"))
			require.Empty(t, h.Get("Access-Control-Allow-Credentials"), "auth is by bearer key, never cookies")
			if tt.wantErrCode != "" {
				requireOpenAIError(t, body, "invalid_request_error", tt.wantErrCode)
			}
			if tt.wantAllow == "" {
				return
			}
			if tt.method == http.MethodOptions {
				require.Contains(t, h.Get("Access-Control-Allow-Methods"), "POST")
				require.Equal(t, "authorization,content-type,x-openai-agents-sdk", h.Get("Access-Control-Allow-Headers"))
			} else {
				require.Contains(t, h.Get("Access-Control-Expose-Headers"), "Location")
			}
		})
	}
}

func TestSplitOrigins(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"*"}, SplitOrigins(" * "))
	require.Equal(t, []string{"https://a.example", "http://b:8080"}, SplitOrigins("https://a.example/, ,http://b:8080"))
	require.Nil(t, SplitOrigins(""))
}

// The default, auto: local pages only without an API key, no other origin with one.
func TestResolveOrigins(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{LocalOrigins}, ResolveOrigins("auto", false))
	require.Nil(t, ResolveOrigins(" auto ", true))
	require.Equal(t, []string{"*"}, ResolveOrigins("*", true))
	require.Equal(t, []string{LocalOrigins, "https://app.example"}, ResolveOrigins("local,https://app.example", true))
	require.Nil(t, ResolveOrigins("", false))
}
