package test

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/omniserve/omniserve"

// layer is each internal package's place in architecture.md's picture. A package may import
// only packages of a lower layer; metrics, config, audio (sample formats, resampling, WAV: pure
// Go, shared by api, session, stage and speech), talkclient (a client: no server code, no cgo)
// and benchreport (the bench commands' report and progress bar) import no internal package at
// all. server, the one place the parts are wired together, is the top: only cmd/ (and the
// end-to-end tests) import it.
var layer = map[string]int{
	"internal/metrics":       0,
	"internal/config":        0,
	"internal/talkclient":    0,
	"internal/benchreport":   0,
	"internal/auth":          0,
	"internal/oaierror":      0,
	"internal/audio":         0,
	"internal/engine":        1,
	"internal/speech":        1,
	"internal/stage":         2,
	"internal/requestclient": 3,
	"internal/session":       4,
	"internal/realtime":      5,
	"internal/api":           6,
	"internal/server":        7,
	// The benchmarks: figures (over benchreport, whose nearest-rank quantile is the one both the
	// printed keys and the report use: one definition, no server code), the outsider latency
	// client (figures and report only), and the in-process measurements over the parts
	// internal/server builds. Only cmd/ imports them.
	"internal/bench":          1,
	"internal/bench/latency":  2,
	"internal/bench/chat":     2,
	"internal/bench/engine":   2,
	"internal/bench/frontend": 3,
	"internal/bench/realtime": 5,
}

// TestImportDirection keeps the import graph pointing down, as architecture.md draws it. It reads
// each package's .Deps, the transitive set `go list -deps` prints, in one `go list` call, so an
// indirect violation is caught too.
func TestImportDirection(t *testing.T) {
	t.Parallel()
	lines := goList(t, binRoot(t), "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", "./...")
	require.NotEmpty(t, lines)
	for _, v := range importViolations(lines) {
		t.Error(v)
	}
}

// TestImportViolationsDetects checks the checker itself on made-up graphs.
func TestImportViolationsDetects(t *testing.T) {
	t.Parallel()
	m := module + "/"
	tests := []struct {
		name string
		line string
		want string // "" = no violation
	}{
		{"down is fine", m + "internal/stage " + m + "internal/engine " + m + "internal/metrics fmt", ""},
		{"cmd may import api", m + "cmd/omniserve " + m + "internal/api " + m + "internal/config", ""},
		{"up is not", m + "internal/engine " + m + "internal/stage", "internal/engine (layer 1) depends on internal/stage"},
		{"sideways is not", m + "internal/engine " + m + "internal/speech", "internal/engine (layer 1) depends on internal/speech"},
		{"speech builds on audio", m + "internal/speech " + m + "internal/audio", ""},
		{"audio imports nothing internal", m + "internal/audio " + m + "internal/speech", "internal/audio (layer 0) depends on internal/speech (layer 1)"},
		{"metrics imports nothing internal", m + "internal/metrics " + m + "internal/engine", "internal/metrics (layer 0) depends on internal/engine"},
		{"nothing imports api", m + "internal/realtime " + m + "internal/api", "imports internal/api"},
		{"nothing imports cmd", m + "internal/stage " + m + "cmd/omniserve", "nothing imports cmd/"},
		{"config is cmd's", m + "internal/session " + m + "internal/config", "imports internal/config"},
		{"server wires api and config", m + "internal/server " + m + "internal/api " + m + "internal/config " + m + "internal/realtime", ""},
		{"server is cmd's", m + "internal/api " + m + "internal/server", "imports internal/server"},
		{"benchmarks are cmd's", m + "internal/server " + m + "internal/bench/chat", "imports internal/bench/chat"},
		{"the latency client uses figures only", m + "internal/bench/latency " + m + "internal/bench " + m + "internal/session", "internal/bench/latency (layer 2) depends on internal/session"},
		{"figures build on the report", m + "internal/bench/latency " + m + "internal/bench " + m + "internal/benchreport", ""},
		{"the report imports no figures", m + "internal/benchreport " + m + "internal/bench", "internal/benchreport (layer 0) depends on internal/bench (layer 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := importViolations([]string{tt.line})
			if tt.want == "" {
				require.Empty(t, got)
				return
			}
			require.NotEmpty(t, got)
			require.Contains(t, strings.Join(got, "\n"), tt.want)
		})
	}
}

// importViolations reads lines of "pkg dep dep ..." and lists every import against the rules.
func importViolations(lines []string) []string {
	var out []string
	for _, l := range lines {
		f := strings.Fields(l)
		rel := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		for _, d := range f[1:] {
			if d == f[0] || !strings.HasPrefix(d, module+"/") {
				continue
			}
			drel := strings.TrimPrefix(d, module+"/")
			fromCmd := strings.HasPrefix(rel, "cmd/") || rel == "test"
			if strings.HasPrefix(drel, "cmd/") {
				out = append(out, rel+" imports "+drel+": nothing imports cmd/")
			}
			wiring := fromCmd || rel == "internal/server"
			if drel == "internal/server" && !fromCmd {
				out = append(out, rel+" imports internal/server: only cmd/ may")
			}
			if strings.HasPrefix(drel, "internal/bench") && !fromCmd && !strings.HasPrefix(rel, "internal/bench") {
				out = append(out, rel+" imports "+drel+": only cmd/ may")
			}
			if drel == "internal/api" && !wiring {
				out = append(out, rel+" imports internal/api: only internal/server and cmd/ may")
			}
			if drel == "internal/config" && !wiring {
				out = append(out, rel+" imports internal/config: only internal/server and cmd/ read the server config")
			}
			lp, pok := layer[rel]
			ld, dok := layer[drel]
			if pok && dok && ld >= lp {
				out = append(out, fmt.Sprintf("%s (layer %d) depends on %s (layer %d): imports must point down architecture.md's picture", rel, lp, drel, ld))
			}
		}
	}
	return out
}

// TestCgoConfinement checks that only internal/engine imports the llama.cpp binding and only engine
// and speech use cgo.
func TestCgoConfinement(t *testing.T) {
	t.Parallel()
	root := binRoot(t)
	lines := goList(t, root, "-f", "{{.ImportPath}}|{{len .CgoFiles}}|{{join .Imports \",\"}}", "./...")
	for _, l := range lines {
		f := strings.SplitN(l, "|", 3)
		require.Len(t, f, 3, l)
		rel := strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")
		if f[1] != "0" && rel != "internal/engine" && rel != "internal/speech" {
			t.Errorf("%s has cgo files: only internal/engine and internal/speech may", rel)
		}
		for _, imp := range strings.Split(f[2], ",") {
			if strings.HasPrefix(imp, "github.com/ollama/ollama/llama") && rel != "internal/engine" {
				t.Errorf("%s imports %s: only internal/engine may", rel, imp)
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
