package realtime_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/clientsecret"
	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// secretsServer serves the minting endpoint and the WebSocket, both keyed with "sk".
func secretsServer(t *testing.T, now func() time.Time) (base string, store *clientsecret.Store) {
	t.Helper()
	store = clientsecret.NewStore(100, now)
	m := session.NewManager(session.ManagerConfig{MaxOutputLead: time.Minute, ModelName: "dummy"}, getFixture(t).backend, zap.NewNop())
	mux := http.NewServeMux()
	mux.Handle("POST /v1/realtime/client_secrets", realtime.NewClientSecretsHandler(store, m, nil))
	mux.Handle("GET /v1/realtime", realtime.NewHandler(realtime.HandlerConfig{APIKey: "sk", Secrets: store}, m, nil))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, m.Shutdown(ctx))
		srv.Close()
	})
	return srv.URL, store
}

func mint(t *testing.T, base, body string) (int, event) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/realtime/client_secrets", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out event
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

func TestClientSecretsMint(t *testing.T) {
	t.Parallel()
	clk := &testClock{t: time.Now()}
	base, _ := secretsServer(t, clk.now)
	tests := []struct {
		name      string
		body      string
		wantCode  int
		wantErr   string // error code; "" = success
		wantParam string
		wantTTL   int64
	}{
		{"empty body: defaults", "", 200, "", "", 600},
		{"ttl and session", `{"expires_after":{"anchor":"created_at","seconds":10},"session":{"type":"realtime","instructions":"Be brief.","audio":{"output":{"voice":"verse"}}}}`, 200, "", "", 10},
		{"max ttl", `{"expires_after":{"seconds":7200}}`, 200, "", "", 7200},
		{"ttl too short", `{"expires_after":{"seconds":9}}`, 400, "integer_out_of_range", "expires_after.seconds", 0},
		{"ttl too long", `{"expires_after":{"seconds":7201}}`, 400, "integer_out_of_range", "expires_after.seconds", 0},
		{"bad anchor", `{"expires_after":{"anchor":"now","seconds":60}}`, 400, "invalid_value", "expires_after.anchor", 0},
		{"unknown field", `{"ttl":60}`, 400, "invalid_json", "", 0},
		{"not JSON", `ek please`, 400, "invalid_json", "", 0},
		{"bad session field", `{"session":{"type":"realtime","audio":{"output":{"format":{"type":"audio/mp3"}}}}}`, 400, "", "", 0},
		{"unserved model", `{"session":{"type":"realtime","model":"gpt-5-nope"}}`, 404, "model_not_found", "session.model", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := mint(t, base, tt.body)
			require.Equal(t, tt.wantCode, code, "%v", out)
			if code != 200 {
				e := out.obj("error")
				require.Equal(t, "invalid_request_error", e.str("type"), "%v", out)
				require.NotEmpty(t, e.str("message"))
				if tt.wantErr != "" {
					require.Equal(t, tt.wantErr, e.str("code"), "%v", out)
				}
				if tt.wantParam != "" {
					require.Equal(t, tt.wantParam, e.str("param"))
				}
				return
			}
			require.True(t, strings.HasPrefix(out.str("value"), "ek_"), "%v", out)
			require.Equal(t, float64(clk.now().Unix()+tt.wantTTL), out["expires_at"])
			sess := out.obj("session")
			require.Equal(t, "realtime", sess.str("type"))
			require.Equal(t, "realtime.session", sess.str("object"))
		})
	}
}

// TestClientSecretOpensItsSession: a WebSocket opened with an ek_ key starts with the session
// the key was minted with (session.created shows it); after expiry the key gets a 401.
func TestClientSecretOpensItsSession(t *testing.T) {
	t.Parallel()
	clk := &testClock{t: time.Now()}
	base, _ := secretsServer(t, clk.now)
	code, out := mint(t, base, `{"expires_after":{"seconds":30},"session":{"type":"realtime","instructions":"Be brief.","audio":{"output":{"voice":"verse"}}}}`)
	require.Equal(t, 200, code, "%v", out)
	require.Equal(t, "Be brief.", out.obj("session").str("instructions"))
	key := out.str("value")
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "/v1/realtime"

	for _, how := range []websocket.DialOptions{
		{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}},
		{Subprotocols: []string{"realtime", "openai-insecure-api-key." + key}}, // how a browser sends it
	} {
		c := dial(t, wsURL, &how)
		created, _ := c.until("session.created", 10*time.Second)
		s := created.obj("session")
		require.Equal(t, "Be brief.", s.str("instructions"))
		require.Equal(t, "verse", s.obj("audio").obj("output").str("voice"))
		c.close()
	}
	// Another session on the API key starts from the defaults.
	c := dial(t, wsURL, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer sk"}}})
	created, _ := c.until("session.created", 10*time.Second)
	require.Empty(t, created.obj("session").str("instructions"))
	c.close()

	clk.advance(30 * time.Second)
	status, body := httpStatus(t, wsURL, http.Header{"Authorization": {"Bearer " + key}})
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, "invalid_api_key", body.obj("error").str("code"))
	status, _ = httpStatus(t, wsURL, http.Header{"Authorization": {"Bearer ek_made_up"}})
	require.Equal(t, http.StatusUnauthorized, status)
}

// TestClientSecretTranscription: a key minted for `"type": "transcription"` opens a
// transcription session (as OpenAI's browser transcription flow does), whatever model the URL
// names (the SDKs always name one); a conversation key cannot open one with
// ?intent=transcription; a bad transcription field is refused at minting with its param.
func TestClientSecretTranscription(t *testing.T) {
	t.Parallel()
	clk := &testClock{t: time.Now()}
	base, _ := secretsServer(t, clk.now)
	code, out := mint(t, base, `{"session":{"type":"transcription","audio":{"input":{"transcription":{"model":"gpt-4o-transcribe","language":"en"},"turn_detection":{"type":"server_vad","silence_duration_ms":400}}}}}`)
	require.Equal(t, 200, code, "%v", out)
	sess := out.obj("session")
	require.Equal(t, "transcription", sess.str("type"), "%v", out)
	require.Equal(t, "realtime.transcription_session", sess.str("object"))
	require.Equal(t, "en", sess.obj("audio").obj("input").obj("transcription").str("language"))
	key := out.str("value")
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "/v1/realtime"

	for _, query := range []string{"?model=gpt-realtime", "?intent=transcription", ""} {
		c := dial(t, wsURL+query, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
		created, _ := c.until("session.created", 10*time.Second)
		s := created.obj("session")
		require.Equal(t, "transcription", s.str("type"), "query %q", query)
		require.Equal(t, "en", s.obj("audio").obj("input").obj("transcription").str("language"))
		c.close()
	}

	code, out = mint(t, base, `{"session":{"type":"realtime"}}`)
	require.Equal(t, 200, code, "%v", out)
	status, body := httpStatus(t, wsURL+"?intent=transcription", http.Header{"Authorization": {"Bearer " + out.str("value")}})
	require.Equal(t, http.StatusBadRequest, status, "%v", body)
	require.Equal(t, "intent", body.obj("error").str("param"))

	code, out = mint(t, base, `{"session":{"type":"transcription","audio":{"input":{"noise_reduction":{"type":"loud_field"}}}}}`)
	require.Equal(t, 400, code, "%v", out)
	require.Equal(t, "session.audio.input.noise_reduction.type", out.obj("error").str("param"))
}
