package gpu

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
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

// TestBindingLayout: every binding struct read or written through unsafe still has the layout
// this package was written for (a binding upgrade that moves a field fails here).
func TestBindingLayout(t *testing.T) {
	require.NoError(t, bindingLayout())
	// The check can fail: a struct with the field at another offset, or of another type.
	type moved struct {
		n int
		c unsafe.Pointer
	}
	var m moved
	require.NoError(t, checkLayout(reflect.TypeFor[moved](), unsafe.Sizeof(m),
		[]fieldWant{{"n", "int", unsafe.Offsetof(m.n)}, {"c", "unsafe.Pointer", unsafe.Offsetof(m.c)}}),
		"the layout it has passes")
	err := checkLayout(reflect.TypeFor[moved](), unsafe.Sizeof(moved{}), []fieldWant{{"c", "", 0}})
	require.ErrorContains(t, err, "offset")
	err = checkLayout(reflect.TypeFor[moved](), unsafe.Sizeof(moved{}), []fieldWant{{"n", "*int", 0}})
	require.ErrorContains(t, err, "want *int")
	err = checkLayout(reflect.TypeFor[moved](), 4, nil)
	require.ErrorContains(t, err, "bytes")
	err = checkLayout(reflect.TypeFor[moved](), unsafe.Sizeof(moved{}), []fieldWant{{"kv_unified", "", 0}})
	require.ErrorContains(t, err, "no field")
}

// TestNoFinalizerFreedCMemory: C memory in this package is freed by its owner, never by a GC
// finalizer (the GC does not see C allocations, so it has no reason to run one soon). The
// binding's SamplingContext is freed only by a finalizer, so it must not be used.
func TestNoFinalizerFreedCMemory(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, bad := range []string{"NewSamplingContext", "SetFinalizer", "AddCleanup"} {
			require.NotContains(t, string(src), bad, "%s uses %s", f, bad)
		}
	}
}
