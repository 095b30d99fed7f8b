package api

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The minted session is checked before the minting handler sees it: too large, too deep or
// with an unknown field is a 400 naming it; anything else reaches the handler unchanged.
func TestGuardClientSecrets(t *testing.T) {
	t.Parallel()
	var got string
	mint := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
		w.WriteHeader(http.StatusOK)
	})
	srv := newTestServer(t, RouterDeps{APIKey: "sk", ClientSecrets: mint, SecretSessionBytes: 1 << 10})
	tests := []struct {
		name, body string
		want       int
		param      string
		code       string
	}{
		{"ordinary", `{"session":{"type":"realtime","instructions":"hi","audio":{"input":{"turn_detection":null}}}}`, 200, "", ""},
		{"no body", ``, 200, "", ""},
		{"no session", `{"expires_after":{"seconds":60}}`, 200, "", ""},
		{"not JSON: the handler answers", `{`, 200, "", ""},
		{"unknown field", `{"session":{"type":"realtime","padding":"x"}}`, 400, "session.padding", "unknown_parameter"},
		{"too large", `{"session":{"instructions":"` + strings.Repeat("x", 1<<10) + `"}}`, 400, "session", "invalid_value"},
		{"too deep", `{"session":{"tools":[{"parameters":` + strings.Repeat(`{"a":`, 100) + `1` + strings.Repeat(`}`, 100) + `}]}}`, 400, "session", "invalid_value"},
	}
	for _, tt := range tests {
		got = ""
		start := time.Now()
		code, _, body := do(t, http.MethodPost, srv.URL+"/v1/realtime/client_secrets", http.Header{"Authorization": {"Bearer sk"}}, tt.body)
		require.Less(t, time.Since(start), time.Second, tt.name)
		require.Equal(t, tt.want, code, "%s: %s", tt.name, body)
		if tt.want == 200 {
			require.Equal(t, tt.body, got, tt.name)
			continue
		}
		requireOpenAIError(t, body, "invalid_request_error", tt.code)
		require.Contains(t, string(body), `"param":"`+tt.param+`"`, tt.name)
	}
}

// FuzzClientSecretSession: whatever the session, the check returns, and a session it lets
// through is within the bounds.
func FuzzClientSecretSession(f *testing.F) {
	for _, s := range []string{`{}`, `{"type":"realtime"}`, `{"junk":1}`, `[[[[[[[[]]]]]]]]`, `"x"`, `{"tools":[{"parameters":{"type":"object"}}]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, session string) {
		e := checkSecretSession([]byte(`{"session":`+session+`}`), 256)
		trimmed := strings.TrimSpace(session)
		if e == nil && len(trimmed) > 256 && json.Valid([]byte(trimmed)) {
			require.Fail(t, "a session over the bound passed", "%q", session)
		}
		if e != nil {
			require.Equal(t, 400, e.Status)
			require.NotEmpty(t, e.Param)
		}
	})
}
