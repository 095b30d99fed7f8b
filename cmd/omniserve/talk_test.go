package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/talkclient"
)

// TestTalkExitCodes checks the talk command's contract without a server binary: usage errors
// are 2, refusals are 1 with one line. test/talk_test.go drives it against the real server.
func TestTalkExitCodes(t *testing.T) {
	t.Parallel()
	wav := filepath.Join(t.TempDir(), "in.wav")
	f, err := os.Create(wav)
	require.NoError(t, err)
	require.NoError(t, talkclient.WriteWAV(f, make([]int16, 2400), 24000))
	require.NoError(t, f.Close())

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "ws://" + ln.Addr().String() + "/v1/realtime"
	require.NoError(t, ln.Close())
	unavailable := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"message":"too many sessions","type":"rate_limit_error","code":"resource_exhausted"}}`))
	}))
	t.Cleanup(unavailable.Close)

	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no input", []string{"talk"}, exitUsage, "--in is required"},
		{"bad pace", []string{"talk", "--in", wav, "--pace", "slow"}, exitUsage, "--pace"},
		{"bad mode", []string{"talk", "--in", wav, "--mode", "auto"}, exitUsage, "--mode"},
		{"bad url", []string{"talk", "--in", wav, "--url", "ftp://x"}, exitUsage, "--url"},
		{"missing file", []string{"talk", "--in", "/nonexistent.wav"}, exitUsage, "/nonexistent.wav"},
		{"unknown flag", []string{"talk", "--in", wav, "--bogus"}, exitUsage, "bogus"},
		{"refused", []string{"talk", "--in", wav, "--url", closed}, exitFailure, "connection refused"},
		{"503", []string{"talk", "--in", wav, "--url", unavailable.URL + "/v1/realtime"}, exitFailure, "503 Service Unavailable: too many sessions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, _, _, stderr := cliRun(t, nil, tt.args...)
			require.Equal(t, tt.code, code, stderr)
			require.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
			require.Contains(t, stderr, tt.want)
		})
	}
}
