package server

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestModelID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"dummy":                         "dummy",
		"dummy:0.6b":                    "dummy:0.6b",
		"/srv/models/qwen2.5-0.5b.gguf": "qwen2.5-0.5b",
		"rel/dir/model.Q4_K_M.gguf":     "model.Q4_K_M",
		"weights.bin":                   "weights.bin",
	} {
		require.Equal(t, want, ModelID(in), in)
	}
}
