package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func newTestServer(t *testing.T, d RouterDeps) *httptest.Server {
	t.Helper()
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	srv := httptest.NewServer(NewRouter(d))
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, method, url string, header http.Header, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, b
}

// requireOpenAIError checks the {"error":{"message","type","param","code"}} shape.
func requireOpenAIError(t *testing.T, body []byte, wantType, wantCode string) {
	t.Helper()
	var env map[string]map[string]any
	require.NoError(t, json.Unmarshal(body, &env), string(body))
	e, ok := env["error"]
	require.True(t, ok, string(body))
	require.NotEmpty(t, e["message"])
	require.Equal(t, wantType, e["type"])
	require.Contains(t, e, "param")
	require.Equal(t, wantCode, e["code"])
}

func TestHealthAndReady(t *testing.T) {
	t.Parallel()
	var ready atomic.Bool
	srv := newTestServer(t, RouterDeps{Ready: ready.Load})

	code, _, _ := do(t, http.MethodGet, srv.URL+"/health", nil, "")
	require.Equal(t, http.StatusOK, code)

	code, _, _ = do(t, http.MethodGet, srv.URL+"/ready", nil, "")
	require.Equal(t, http.StatusServiceUnavailable, code, "not ready before load")
	ready.Store(true)
	code, _, _ = do(t, http.MethodGet, srv.URL+"/ready", nil, "")
	require.Equal(t, http.StatusOK, code)
	ready.Store(false) // draining
	code, _, _ = do(t, http.MethodGet, srv.URL+"/ready", nil, "")
	require.Equal(t, http.StatusServiceUnavailable, code)
}

func TestReadyNilIsNeverReady(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, RouterDeps{})
	code, _, _ := do(t, http.MethodGet, srv.URL+"/ready", nil, "")
	require.Equal(t, http.StatusServiceUnavailable, code)
}

func TestModelsShape(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, RouterDeps{Models: []string{"dummy", "other"}})
	code, h, body := do(t, http.MethodGet, srv.URL+"/v1/models", nil, "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "application/json", h.Get("Content-Type"))
	var got struct {
		Object string `json:"object"`
		Data   []struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			OwnedBy string `json:"owned_by"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &got))
	require.Equal(t, "list", got.Object)
	require.Len(t, got.Data, 2)
	require.Equal(t, "dummy", got.Data[0].ID)
	require.Equal(t, "other", got.Data[1].ID)
	for _, m := range got.Data {
		require.Equal(t, "model", m.Object)
		require.Positive(t, m.Created)
		require.Equal(t, "omniserve", m.OwnedBy)
	}
}

func TestAPIKey(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, RouterDeps{APIKey: "s3cret", Models: []string{"dummy"}, Ready: func() bool { return true }})
	tests := []struct {
		name   string
		path   string
		header http.Header
		want   int
	}{
		{"missing key", "/v1/models", nil, http.StatusUnauthorized},
		{"wrong key", "/v1/models", http.Header{"Authorization": {"Bearer nope"}}, http.StatusUnauthorized},
		{"wrong scheme", "/v1/models", http.Header{"Authorization": {"Basic czNjcmV0"}}, http.StatusUnauthorized},
		{"prefix of key", "/v1/models", http.Header{"Authorization": {"Bearer s3cre"}}, http.StatusUnauthorized},
		{"right key", "/v1/models", http.Header{"Authorization": {"Bearer s3cret"}}, http.StatusOK},
		{"lower-case scheme", "/v1/models", http.Header{"Authorization": {"bearer s3cret"}}, http.StatusOK},
		{"websocket subprotocol key", "/v1/models", http.Header{"Sec-Websocket-Protocol": {"realtime, openai-insecure-api-key.s3cret"}}, http.StatusOK},
		{"chat needs key too", "/v1/chat/completions", nil, http.StatusUnauthorized},
		{"health stays open", "/health", nil, http.StatusOK},
		{"ready stays open", "/ready", nil, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			method := http.MethodGet
			if strings.HasSuffix(tt.path, "completions") {
				method = http.MethodPost
			}
			code, h, body := do(t, method, srv.URL+tt.path, tt.header, "")
			require.Equal(t, tt.want, code, string(body))
			if tt.want == http.StatusUnauthorized {
				requireOpenAIError(t, body, "invalid_request_error", "invalid_api_key")
				require.Contains(t, h.Get("WWW-Authenticate"), "Bearer")
			}
		})
	}
}

func TestPanicRecovery(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.InfoLevel)
	var calls atomic.Int32
	boom := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			panic("boom")
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := newTestServer(t, RouterDeps{Log: zap.New(core), Chat: boom})

	code, h, body := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", nil, "{}")
	require.Equal(t, http.StatusInternalServerError, code)
	requireOpenAIError(t, body, "server_error", "internal_error")
	require.NotEmpty(t, h.Get(RequestIDHeader))

	// The server keeps serving, the same handler included.
	code, _, _ = do(t, http.MethodPost, srv.URL+"/v1/chat/completions", nil, "{}")
	require.Equal(t, http.StatusNoContent, code)
	code, _, _ = do(t, http.MethodGet, srv.URL+"/health", nil, "")
	require.Equal(t, http.StatusOK, code)

	panics := logs.FilterMessage("handler panic").All()
	require.Len(t, panics, 1)
	require.Equal(t, h.Get(RequestIDHeader), panics[0].ContextMap()["request_id"])
	access := logs.FilterMessage("request").FilterField(zap.Int("status", 500)).All()
	require.Len(t, access, 1, "the access log records the recovered 500")
}

func TestUnconfiguredHandlersAnswer503(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, RouterDeps{})
	code, _, body := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", nil, "{}")
	require.Equal(t, http.StatusServiceUnavailable, code)
	requireOpenAIError(t, body, "server_error", "unavailable")
	code, _, body = do(t, http.MethodGet, srv.URL+"/v1/realtime", nil, "")
	require.Equal(t, http.StatusServiceUnavailable, code)
	requireOpenAIError(t, body, "server_error", "unavailable")
}

func TestNotFoundAndMethodShape(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, RouterDeps{})
	code, _, body := do(t, http.MethodGet, srv.URL+"/v1/nope", nil, "")
	require.Equal(t, http.StatusNotFound, code)
	requireOpenAIError(t, body, "invalid_request_error", "not_found")
	code, _, body = do(t, http.MethodDelete, srv.URL+"/v1/models", nil, "")
	require.Equal(t, http.StatusMethodNotAllowed, code)
	requireOpenAIError(t, body, "invalid_request_error", "method_not_allowed")
}

func TestBodyLimit(t *testing.T) {
	t.Parallel()
	var readErr atomic.Value
	chat := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		if err != nil {
			readErr.Store(err)
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	srv := newTestServer(t, RouterDeps{Chat: chat, MaxBodyBytes: 2048})

	code, _, _ := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", nil, strings.Repeat("a", 2048))
	require.Equal(t, http.StatusOK, code)
	// A declared length over the limit is refused before the handler runs.
	code, _, body := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", nil, strings.Repeat("a", 4096))
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	requireOpenAIError(t, body, "invalid_request_error", "request_too_large")
	// A chunked body (no length) is cut off while the handler reads it.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/chat/completions", io.MultiReader(strings.NewReader(strings.Repeat("b", 4096))))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	var mbe *http.MaxBytesError
	require.ErrorAs(t, readErr.Load().(error), &mbe)
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, RouterDeps{})
	_, h, _ := do(t, http.MethodGet, srv.URL+"/health", http.Header{RequestIDHeader: {"client-id-1"}}, "")
	require.Equal(t, "client-id-1", h.Get(RequestIDHeader))
	_, h, _ = do(t, http.MethodGet, srv.URL+"/health", http.Header{RequestIDHeader: {"bad id\twith space"}}, "")
	require.Len(t, h.Get(RequestIDHeader), 36, "malformed ids are replaced by a uuid")
}

func TestMetricsMounted(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "omniserve_test_events_total", Help: "test"})
	reg.MustRegister(c)
	c.Inc()
	srv := newTestServer(t, RouterDeps{Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})})
	code, _, body := do(t, http.MethodGet, srv.URL+"/metrics", nil, "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), "omniserve_test_events_total 1")

	srv2 := newTestServer(t, RouterDeps{})
	code, _, _ = do(t, http.MethodGet, srv2.URL+"/metrics", nil, "")
	require.Equal(t, http.StatusNotFound, code)
}

func TestModelByID(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, RouterDeps{Models: []string{"dummy:tiny", "org/name"}})
	for _, id := range []string{"dummy:tiny", "org/name"} {
		code, _, body := do(t, http.MethodGet, srv.URL+"/v1/models/"+id, nil, "")
		require.Equal(t, http.StatusOK, code, string(body))
		var m struct {
			ID, Object, OwnedBy string
			Created             int64
		}
		require.NoError(t, json.Unmarshal(body, &m))
		require.Equal(t, id, m.ID)
		require.Equal(t, "model", m.Object)
		require.Positive(t, m.Created)
	}
	code, _, body := do(t, http.MethodGet, srv.URL+"/v1/models/gpt-4o", nil, "")
	require.Equal(t, http.StatusNotFound, code)
	var e struct {
		Error struct {
			Type, Message string
			Code, Param   *string
		}
	}
	require.NoError(t, json.Unmarshal(body, &e))
	require.Equal(t, "invalid_request_error", e.Error.Type)
	require.Equal(t, "model_not_found", *e.Error.Code)
	require.Contains(t, e.Error.Message, "gpt-4o")
}
