package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// chromiumPath is Debian's chromium, installed by `make deps`.
const chromiumPath = "/usr/bin/chromium"

// browserHarness returns node and test/browser, the Node harness that drives headless Chromium
// with puppeteer-core, installing its node_modules (npm ci, no browser download) when missing.
// Without node, npm or Chromium the test is skipped, or fails under CI.
func browserHarness(ctx context.Context, t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	npm, npmErr := exec.LookPath("npm")
	_, chromeErr := os.Stat(chromiumPath)
	if err != nil || npmErr != nil || chromeErr != nil {
		msg := "browser tests need node, npm and " + chromiumPath + " (make deps installs them)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir = filepath.Join(binRoot(t), "test", "browser")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "puppeteer-core")); err != nil {
		install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		install.Dir = dir
		install.Env = append(os.Environ(), "PUPPETEER_SKIP_DOWNLOAD=1")
		out, err := install.CombinedOutput()
		require.NoError(t, err, "npm ci in %s:\n%s", dir, out)
	}
	return node, dir
}
