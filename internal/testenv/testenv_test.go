package testenv

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// recorder is a testing.TB that records how a helper ended t; Skipf and Fatalf stop the
// helper's goroutine as the real ones do.
type recorder struct {
	testing.TB
	mu      sync.Mutex
	skipped string
	failed  string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.mu.Lock()
	r.skipped = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.failed = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

// run calls f with a recorder on its own goroutine (f may Goexit) and waits for it.
func run(t *testing.T, f func(testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestNeedFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "goforward.raw")

	t.Setenv("CI", "")
	r := run(t, func(tb testing.TB) { NeedFile(tb, missing, "pocketsphinx-testdata") })
	require.Contains(t, r.skipped, "pocketsphinx-testdata")
	require.Empty(t, r.failed, "a developer without the package skips")

	t.Setenv("CI", "true")
	r = run(t, func(tb testing.TB) { NeedFile(tb, missing, "pocketsphinx-testdata") })
	require.Empty(t, r.skipped)
	require.Contains(t, r.failed, "CI=true but")
	require.Contains(t, r.failed, "pocketsphinx-testdata", "CI fails instead of skipping")

	present := t.TempDir()
	r = run(t, func(tb testing.TB) { NeedFile(tb, present, "x") })
	require.Empty(t, r.skipped)
	require.Empty(t, r.failed)
}
