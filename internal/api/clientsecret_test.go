package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/clientsecret"
)

// TestClientSecretScope: an ek_ key opens a realtime connection and nothing else; a stale one is
// a 401 in OpenAI's shape even on a server without an API key.
func TestClientSecretScope(t *testing.T) {
	t.Parallel()
	now := time.Now()
	clock := func() time.Time { return now }
	store := clientsecret.NewStore(10, clock)
	live, err := store.Mint(time.Minute, nil)
	require.NoError(t, err)
	// seen answers 200 and says whether the request carried the client secret.
	seen := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if clientsecret.FromContext(r.Context()) != nil {
			w.Header().Set("X-Secret", "1")
		}
		w.WriteHeader(http.StatusOK)
	})
	for _, key := range []string{"sk", ""} {
		srv := newTestServer(t, RouterDeps{APIKey: key, Secrets: store, Models: []string{"dummy"},
			Realtime: seen, ClientSecrets: seen, Chat: seen})
		tests := []struct {
			name       string
			method     string
			path       string
			auth       string
			want       int
			wantSecret bool
		}{
			{"ek opens the WebSocket", http.MethodGet, "/v1/realtime", live.Value, 200, true},
			{"ek lists no models", http.MethodGet, "/v1/models", live.Value, 401, false},
			{"ek mints no secret", http.MethodPost, "/v1/realtime/client_secrets", live.Value, 401, false},
			{"ek runs no chat", http.MethodPost, "/v1/chat/completions", live.Value, 401, false},
			{"made-up ek", http.MethodGet, "/v1/realtime", "ek_0123", 401, false},
		}
		if key != "" {
			tests = append(tests, struct {
				name       string
				method     string
				path       string
				auth       string
				want       int
				wantSecret bool
			}{"API key mints", http.MethodPost, "/v1/realtime/client_secrets", "sk", 200, false})
		}
		for _, tt := range tests {
			t.Run(key+"/"+tt.name, func(t *testing.T) {
				code, h, body := do(t, tt.method, srv.URL+tt.path, http.Header{"Authorization": {"Bearer " + tt.auth}}, "")
				require.Equal(t, tt.want, code, string(body))
				require.Equal(t, tt.wantSecret, h.Get("X-Secret") == "1")
				if code == http.StatusUnauthorized {
					requireOpenAIError(t, body, "invalid_request_error", "invalid_api_key")
				}
			})
		}
	}
	now = now.Add(time.Minute)
	srv := newTestServer(t, RouterDeps{APIKey: "sk", Secrets: store, Realtime: seen})
	code, _, body := do(t, http.MethodGet, srv.URL+"/v1/realtime", http.Header{"Authorization": {"Bearer " + live.Value}}, "")
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, string(body), "expired")
}

// A client secret opens at most the store's bound of sessions: the next gets 429 with
// Retry-After, and another key is not affected.
func TestClientSecretSessionBound(t *testing.T) {
	t.Parallel()
	store := clientsecret.NewStore(10, nil).WithMaxOpens(2)
	a, err := store.Mint(time.Minute, nil)
	require.NoError(t, err)
	b, err := store.Mint(time.Minute, nil)
	require.NoError(t, err)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	srv := newTestServer(t, RouterDeps{APIKey: "sk", Secrets: store, Realtime: ok, Calls: ok})
	open := func(key, method, path string) (int, http.Header, []byte) {
		return do(t, method, srv.URL+path, http.Header{"Authorization": {"Bearer " + key}}, "")
	}
	code, _, _ := open(a.Value, http.MethodGet, "/v1/realtime")
	require.Equal(t, http.StatusOK, code)
	code, _, _ = open(a.Value, http.MethodPost, "/v1/realtime/calls")
	require.Equal(t, http.StatusOK, code)
	code, h, body := open(a.Value, http.MethodGet, "/v1/realtime")
	require.Equal(t, http.StatusTooManyRequests, code)
	require.NotEmpty(t, h.Get("Retry-After"))
	requireOpenAIError(t, body, "rate_limit_error", "rate_limit_exceeded")
	code, _, _ = open(b.Value, http.MethodGet, "/v1/realtime")
	require.Equal(t, http.StatusOK, code)
	code, _, _ = open("sk", http.MethodGet, "/v1/realtime")
	require.Equal(t, http.StatusOK, code, "the API key is not counted")
}
