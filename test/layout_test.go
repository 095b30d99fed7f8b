package test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// designLayout is the top-level layout of the project's design card: the places a reader is
// promised to find each part. Renaming or moving one of them is a change of the design, made
// there first, not here.
var designLayout = []struct {
	path string
	dir  bool
}{
	{"go.mod", false},
	{"cmd/omniserve", true},
	{"internal/realtime", true},
	{"internal/session", true},
	{"internal/requestclient", true},
	{"internal/metrics", true},
	{"internal/stage", true},
	{"internal/gpu", true}, // the model-runner bridge: cgo to llama.cpp, CUDA when present
	{"configs", true},
	{"test", true},
	{"Dockerfile", false},
	{"Makefile", false},
}

// TestDesignLayout checks that every part the design card lists is where it says, as a Go
// package where it is one.
func TestDesignLayout(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	for _, p := range designLayout {
		st, err := os.Stat(filepath.Join(root, p.path))
		require.NoError(t, err, "design card lists %s", p.path)
		require.Equal(t, p.dir, st.IsDir(), "%s: directory %v", p.path, p.dir)
		if p.dir && p.path != "test" && p.path != "configs" {
			gofiles, err := filepath.Glob(filepath.Join(root, p.path, "*.go"))
			require.NoError(t, err)
			require.NotEmpty(t, gofiles, "%s holds no Go package", p.path)
		}
	}
}
