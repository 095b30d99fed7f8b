package test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/omniserve/omniserve"

// layer is each internal package's place in architecture.md's picture. A package may import
// only packages of a lower layer; metrics and config import no internal package at all.
var layer = map[string]int{
	"internal/metrics":       0,
	"internal/config":        0,
	"internal/gpu":           1,
	"internal/speech":        1,
	"internal/stage":         2,
	"internal/requestclient": 3,
	"internal/session":       4,
	"internal/realtime":      5,
	"internal/api":           6,
}

// TestImportDirection keeps the import graph pointing down, as architecture.md draws it. It reads
// each package's .Deps, the transitive set `go list -deps` prints, in one `go list` call, so an
// indirect violation is caught too.
func TestImportDirection(t *testing.T) {
	t.Parallel()
	root := binRoot(t)
	lines := goList(t, root, "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", "./...")
	require.NotEmpty(t, lines)
	for _, l := range lines {
		f := strings.Fields(l)
		p, deps := f[0], f[1:]
		rel := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		for _, d := range deps {
			if d == p || !strings.HasPrefix(d, module+"/") {
				continue
			}
			drel := strings.TrimPrefix(d, module+"/")
			if strings.HasPrefix(drel, "cmd/") {
				t.Errorf("%s imports %s: nothing imports cmd/", rel, drel)
			}
			if drel == "internal/api" && !strings.HasPrefix(rel, "cmd/") && rel != "test" {
				t.Errorf("%s imports internal/api: only cmd/ may", rel)
			}
			if drel == "internal/config" && !strings.HasPrefix(rel, "cmd/") && rel != "test" {
				t.Errorf("%s imports internal/config: only cmd/ reads the server config", rel)
			}
			lp, pok := layer[rel]
			ld, dok := layer[drel]
			if pok && dok && ld >= lp {
				t.Errorf("%s (layer %d) depends on %s (layer %d): imports must point down architecture.md's picture", rel, lp, drel, ld)
			}
		}
	}
}

// TestCgoConfinement checks that only internal/gpu imports the llama.cpp binding and only gpu
// and speech use cgo.
func TestCgoConfinement(t *testing.T) {
	t.Parallel()
	root := binRoot(t)
	lines := goList(t, root, "-f", "{{.ImportPath}} {{len .CgoFiles}} {{join .Imports \",\"}}", "./...")
	for _, l := range lines {
		f := strings.SplitN(l, " ", 3)
		require.Len(t, f, 3, l)
		rel := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		if f[1] != "0" && rel != "internal/gpu" && rel != "internal/speech" {
			t.Errorf("%s has cgo files: only internal/gpu and internal/speech may", rel)
		}
		for _, imp := range strings.Split(f[2], ",") {
			if strings.HasPrefix(imp, "github.com/ollama/ollama/llama") && rel != "internal/gpu" {
				t.Errorf("%s imports %s: only internal/gpu may", rel, imp)
			}
		}
	}
}

func goList(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-e"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	var stderr string
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		stderr = string(ee.Stderr)
	}
	require.NoError(t, err, stderr)
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}
