package gpu

import (
	"testing"
	"unsafe"

	"github.com/ollama/ollama/llama"
	"github.com/ollama/ollama/ml"
	"github.com/stretchr/testify/require"
)

// TestContextParamsLayout guards the hand-written mirror of llama_context_params: if the
// binding's llama.cpp changes the struct, setContextFlags must refuse instead of writing into
// the wrong field.
func TestContextParamsLayout(t *testing.T) {
	cp := llama.NewContextParams(4096, 256, 8, 3, ml.FlashAttentionAuto, "")
	c := (*cContextParams)(unsafe.Pointer(&cp))
	require.Equal(t, uint32(256*8), c.nBatch)
	require.Equal(t, uint32(256), c.nUbatch)
	require.False(t, c.kvUnified)
	require.True(t, setContextFlags(&cp, 4096, 8, 3))
	require.True(t, c.kvUnified)
	require.False(t, c.embeddings)
	other := llama.NewContextParams(4096, 256, 8, 3, ml.FlashAttentionAuto, "")
	require.False(t, setContextFlags(&other, 2048, 8, 3), "mismatching values are refused")
}
