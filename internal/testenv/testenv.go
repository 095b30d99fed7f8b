// Package testenv tells tests what the machine they run on provides. Tests only import it.
package testenv

import (
	"os"
	"testing"
)

// CI reports whether the tests run in continuous integration: CI=true, as GitHub Actions,
// GitLab CI and most other CI systems set it.
func CI() bool { return os.Getenv("CI") == "true" }

// Missing skips t because something it needs from the system (a Debian data package, a tool)
// is not installed, so that a developer without it can still run the rest. Under CI, where
// `make deps` installs everything, the absence fails t instead: a suite must not pass there
// by skipping what it was meant to test.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if CI() {
		t.Fatalf("CI=true but "+format, args...)
	}
	t.Skipf(format, args...)
}

// NeedFile calls Missing unless path exists; pkg is the Debian package that installs it.
func NeedFile(t testing.TB, path, pkg string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Missing(t, "%s not found (install the Debian package %s, or `make deps`): %v", path, pkg, err)
	}
}

// ReadFile returns the contents of a file from a Debian data package, calling Missing when
// the file is absent.
func ReadFile(t testing.TB, path, pkg string) []byte {
	t.Helper()
	NeedFile(t, path, pkg)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return b
}
