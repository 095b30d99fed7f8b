package api

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An offer over its bound is a 413 before the calls handler sees it; a real one passes
// unchanged.
func TestGuardCallOffer(t *testing.T) {
	t.Parallel()
	var got string
	calls := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
		w.WriteHeader(http.StatusCreated)
	})
	srv := newTestServer(t, RouterDeps{Calls: calls})
	offer := "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n"
	tests := []struct {
		name, ctype, body string
		want              int
		param             string
	}{
		{"real offer", "application/sdp", offer, http.StatusCreated, ""},
		{"60 KiB offer", "application/sdp", offer + strings.Repeat("a=x\r\n", 12<<10), http.StatusCreated, ""},
		{"a 1 MiB offer", "application/sdp", offer + strings.Repeat("a=x\r\n", 200<<10), http.StatusRequestEntityTooLarge, "sdp"},
		{"a 2 MiB form", "multipart/form-data; boundary=x", strings.Repeat("y", 2<<20), http.StatusRequestEntityTooLarge, ""},
		{"a form under its bound", "multipart/form-data; boundary=x", strings.Repeat("y", 512<<10), http.StatusCreated, ""},
	}
	for _, tt := range tests {
		got = ""
		start := time.Now()
		code, _, body := do(t, http.MethodPost, srv.URL+"/v1/realtime/calls", http.Header{"Content-Type": {tt.ctype}}, tt.body)
		require.Less(t, time.Since(start), time.Second, tt.name)
		require.Equal(t, tt.want, code, "%s: %s", tt.name, body)
		if code == http.StatusCreated {
			require.Equal(t, tt.body, got, tt.name)
			continue
		}
		requireOpenAIError(t, body, "invalid_request_error", "request_too_large")
		require.Contains(t, string(body), `"param":`+map[bool]string{true: `"sdp"`, false: `null`}[tt.param != ""], tt.name)
	}
}
