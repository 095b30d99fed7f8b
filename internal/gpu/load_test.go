package gpu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ollama/ollama/fs/ggml"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/omniserve/omniserve/internal/testenv"
)

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, data, 0o644))
	return p
}

// writeGGUF writes a tiny-preset GGUF after letting edit change its metadata or tensors.
func writeGGUF(t *testing.T, edit func(ggml.KV, []*ggml.Tensor) []*ggml.Tensor) string {
	t.Helper()
	kv, ts := dummyPresets["tiny"].build()
	ts = edit(kv, ts)
	p := filepath.Join(t.TempDir(), "m.gguf")
	f, err := os.Create(p)
	require.NoError(t, err)
	require.NoError(t, ggml.WriteGGUF(f, kv, ts))
	require.NoError(t, f.Close())
	return p
}

func TestLoadErrors(t *testing.T) {
	tiny, err := ensureDummy(testCacheDir, dummyPresets["tiny"])
	require.NoError(t, err)
	good, err := os.ReadFile(tiny)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		path   func(t *testing.T) string
		device string
		reason error
	}{
		{"missing", func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope.gguf") }, "", ErrModelNotFound},
		{"directory", func(t *testing.T) string { return t.TempDir() }, "", ErrNotGGUF},
		{"not gguf", func(t *testing.T) string { return writeFile(t, "x.gguf", []byte("hello, this is not a model")) }, "", ErrNotGGUF},
		{"empty", func(t *testing.T) string { return writeFile(t, "e.gguf", nil) }, "", ErrNotGGUF},
		{"truncated header", func(t *testing.T) string { return writeFile(t, "h.gguf", good[:100]) }, "", ErrCorruptModel},
		{"truncated tensors", func(t *testing.T) string { return writeFile(t, "t.gguf", good[:len(good)-4096]) }, "", ErrCorruptModel},
		{"unsupported arch", func(t *testing.T) string {
			return writeGGUF(t, func(kv ggml.KV, ts []*ggml.Tensor) []*ggml.Tensor {
				kv["general.architecture"] = "bert"
				return ts
			})
		}, "", ErrUnsupportedArch},
		{"unknown arch", func(t *testing.T) string {
			return writeGGUF(t, func(kv ggml.KV, ts []*ggml.Tensor) []*ggml.Tensor {
				kv["general.architecture"] = "martian"
				return ts
			})
		}, "", ErrUnsupportedArch},
		{"missing tensor", func(t *testing.T) string {
			return writeGGUF(t, func(kv ggml.KV, ts []*ggml.Tensor) []*ggml.Tensor {
				for i, tn := range ts {
					if tn.Name == "blk.1.ffn_up.weight" {
						return append(ts[:i], ts[i+1:]...)
					}
				}
				return ts
			})
		}, "", ErrCorruptModel},
		{"wrong tensor shape", func(t *testing.T) string {
			return writeGGUF(t, func(kv ggml.KV, ts []*ggml.Tensor) []*ggml.Tensor {
				for _, tn := range ts {
					if tn.Name == "blk.0.attn_q.weight" {
						tn.Shape = []uint64{64, 32}
					}
				}
				return ts
			})
		}, "", ErrCorruptModel},
		{"cuda without gpu", func(t *testing.T) string { return tiny }, "cuda", ErrBackendUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path(t)
			r, err := Load(context.Background(), Config{Model: path, Device: tc.device, Threads: 1}, zaptest.NewLogger(t))
			if r != nil {
				r.Close()
			}
			require.ErrorIs(t, err, tc.reason)
			var le *LoadError
			require.True(t, errors.As(err, &le))
			require.Equal(t, path, le.Path)
			require.Contains(t, err.Error(), path)
			t.Log(err)
		})
	}
}

func TestLoadTooLarge(t *testing.T) {
	avail, ok := memAvailable()
	if !ok {
		testenv.Missing(t, "no readable MemAvailable in /proc/meminfo (a Linux kernel provides it)")
	}
	tiny, err := ensureDummy(testCacheDir, dummyPresets["tiny"])
	require.NoError(t, err)
	good, err := os.ReadFile(tiny)
	require.NoError(t, err)
	p := writeFile(t, "big.gguf", good)
	// A sparse file larger than available memory: the check looks at the size only.
	require.NoError(t, os.Truncate(p, int64(avail)+1<<30))
	_, err = Load(context.Background(), Config{Model: p, Threads: 1}, zaptest.NewLogger(t))
	require.ErrorIs(t, err, ErrModelTooLarge)
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []Config{{Model: "dummy:huge"}, {Device: "tpu"}, {Overflow: "wrap"}} {
		cfg.CacheDir = testCacheDir
		_, err := Load(context.Background(), cfg, zaptest.NewLogger(t))
		require.ErrorIs(t, err, ErrInvalidConfig)
	}
}

func TestDummyCacheConcurrentAndReused(t *testing.T) {
	dir := t.TempDir()
	p := dummyPresets["tiny"]
	var wg sync.WaitGroup
	paths := make([]string, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i], errs[i] = ensureDummy(dir, p)
		}()
	}
	wg.Wait()
	for i := range 4 {
		require.NoError(t, errs[i])
		require.Equal(t, paths[0], paths[i])
	}
	first, err := os.ReadFile(paths[0])
	require.NoError(t, err)
	require.Less(t, len(first), 5<<20, "tiny stays under 5 MB")
	st, err := os.Stat(paths[0])
	require.NoError(t, err)
	// Reused: a second call does not rewrite the file.
	_, err = ensureDummy(dir, p)
	require.NoError(t, err)
	st2, err := os.Stat(paths[0])
	require.NoError(t, err)
	require.Equal(t, st.ModTime(), st2.ModTime())
	// Deterministic: regenerating gives the same bytes; a corrupt file is replaced.
	require.NoError(t, os.WriteFile(paths[0], first[:len(first)/2], 0o644))
	_, err = ensureDummy(dir, p)
	require.NoError(t, err)
	again, err := os.ReadFile(paths[0])
	require.NoError(t, err)
	require.Equal(t, first, again)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temp files left behind")
}

// TestLoadErrorKeepsLlamaReason: a file that passes the header checks but that llama.cpp
// refuses fails with llama.cpp's own reason, not a pointer to its log.
func TestLoadErrorKeepsLlamaReason(t *testing.T) {
	path := writeGGUF(t, func(kv ggml.KV, ts []*ggml.Tensor) []*ggml.Tensor {
		for i, tn := range ts {
			if tn.Name == "blk.1.ffn_up.weight" {
				return append(ts[:i], ts[i+1:]...)
			}
		}
		return ts
	})
	_, err := Load(context.Background(), Config{Model: path, Device: "cpu", Threads: 1}, zaptest.NewLogger(t))
	require.ErrorIs(t, err, ErrCorruptModel)
	require.Contains(t, err.Error(), "missing tensor 'blk.1.ffn_up.weight'")
	// The capture ends with the load: later llama.cpp errors are not kept.
	require.False(t, logTap.capturing)
}
