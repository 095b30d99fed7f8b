package test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/testenv"
)

// npmInstalls runs each Node project's install once per test process: the Agents SDK's project
// serves both its WebSocket quick-start and its browser bundle, the Node SDK's several scripts,
// and a second `npm ci` while another test runs from the same node_modules would pull it away.
var npmInstalls = struct {
	mu   sync.Mutex
	done map[string]*npmInstall
}{done: map[string]*npmInstall{}}

type npmInstall struct {
	once sync.Once
	out  []byte
	err  error
}

// npmProject returns the path of test/<name> with its pinned node_modules installed
// (`npm ci` from its package-lock.json, at most once per test process, with env added). It
// skips when npm is missing, or fails under CI=true.
func npmProject(ctx context.Context, t *testing.T, name string, env ...string) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		testenv.Missing(t, "npm is not installed: skipping a test that needs test/%s (`make deps` installs it)", name)
	}
	dir := filepath.Join(repoRoot(t), "test", name)
	npmInstalls.mu.Lock()
	in := npmInstalls.done[dir]
	if in == nil {
		in = &npmInstall{}
		npmInstalls.done[dir] = in
	}
	npmInstalls.mu.Unlock()
	in.once.Do(func() {
		install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		install.Dir = dir
		install.Env = append(os.Environ(), env...)
		in.out, in.err = install.CombinedOutput()
	})
	require.NoError(t, in.err, "npm ci in %s:\n%s", dir, in.out)
	return dir
}

// runNode runs script in test/<project> (its pinned node_modules installed by npmProject) with
// env added, within timeout, and returns its last stdout line and its stderr; a failing script
// fails the test. It skips only when node is not installed at all (and fails then under CI=true).
func runNode(t *testing.T, project, script string, timeout time.Duration, env ...string) (last, stderr string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node is not installed: skipping test/%s/%s (`make deps` installs it)", project, script)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	dir := npmProject(ctx, t, project)
	run := exec.CommandContext(ctx, node, script)
	run.Dir = dir
	run.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	run.Stdout, run.Stderr = &out, &errOut
	require.NoError(t, run.Run(), "%s failed:\nstdout: %s\nstderr: %s", script, out.String(), errOut.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	t.Logf("%s: %s", script, lines[len(lines)-1])
	return lines[len(lines)-1], errOut.String()
}
