package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func get(t *testing.T, h http.Handler, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	res := rec.Result()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, string(b)
}

func TestHandler(t *testing.T) {
	t.Parallel()
	h := Handler()
	tests := []struct {
		path, ctype, contains string
	}{
		{"/", "text/html", `<script src="/console/app.js"`},
		{"/console/app.js", "javascript", "window.omni"},
		{"/console/worklet.js", "javascript", `registerProcessor("omni-player"`},
		{"/console/style.css", "text/css", "@media"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			res, body := get(t, h, tt.path)
			require.Equal(t, http.StatusOK, res.StatusCode)
			require.Contains(t, res.Header.Get("Content-Type"), tt.ctype)
			require.Contains(t, res.Header.Get("Content-Security-Policy"), "script-src 'self'")
			require.Contains(t, body, tt.contains)
		})
	}
	res, _ := get(t, h, "/console/nope.js")
	require.Equal(t, http.StatusNotFound, res.StatusCode)
}

// TestNoCDN keeps the console offline-capable: nothing it loads comes from elsewhere.
func TestNoCDN(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"index.html", "app.js", "worklet.js", "style.css"} {
		b, err := static.ReadFile("static/" + f)
		require.NoError(t, err)
		for _, bad := range []string{"https://", "http://", "//cdn", "import "} {
			require.NotContains(t, strings.ReplaceAll(string(b), "${location.protocol}//", ""), bad, f)
		}
	}
}
