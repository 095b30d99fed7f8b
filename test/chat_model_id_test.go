package test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/gpu"
)

// TestChatModelIDNotPath serves a model given as a .gguf path and checks that its public id,
// in /v1/models, in chat answers and in the open /metrics model_name label, is the file's base
// name, never the path; the path itself stays accepted as "model".
func TestChatModelIDNotPath(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cache := t.TempDir()
	r, err := gpu.Load(ctx, gpu.Config{Model: chatModel, CacheDir: cache, Device: "cpu"}, zap.NewNop())
	require.NoError(t, err)
	src := r.Info().Path
	require.NoError(t, r.Close())
	dir := filepath.Join(t.TempDir(), "secret", "layout")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, "tiny-chat.gguf")
	raw, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, raw, 0o644))

	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", path, "--device", "cpu", "--log-stats")
	code, body := s.get(t, "/v1/models")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), `"id":"tiny-chat"`)
	require.NotContains(t, string(body), "secret")
	code, _ = s.get(t, "/v1/models/tiny-chat")
	require.Equal(t, http.StatusOK, code)

	for _, model := range []string{"tiny-chat", path} {
		resp, err := http.Post("http://"+s.addr+"/v1/chat/completions", "application/json", //nolint:noctx // bounded by the server under test
			strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hello"}],"max_tokens":3}`))
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	}
	code, metrics := s.get(t, "/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(metrics), `model_name="tiny-chat"`)
	require.NotContains(t, string(metrics), "secret")
	require.NotContains(t, string(metrics), ".gguf")
}
