package test

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/omniserve/omniserve/internal/testenv"
)

// chromiumPath is Debian's chromium, installed by `make deps`.
const chromiumPath = "/usr/bin/chromium"

// browserHarness returns node and test/browser, the Node harness that drives headless Chromium
// with puppeteer-core, installing its node_modules (npm ci, no browser download) when missing.
// Without node, npm or Chromium the test is skipped, or fails under CI.
func browserHarness(ctx context.Context, t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	_, chromeErr := os.Stat(chromiumPath)
	if err != nil || chromeErr != nil {
		testenv.Missing(t, "browser tests need node, npm and %s (make deps installs them)", chromiumPath)
	}
	return node, npmProject(ctx, t, "browser", "PUPPETEER_SKIP_DOWNLOAD=1")
}
