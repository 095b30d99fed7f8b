package gpu

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A temp file left by a generation that was killed is removed at the next start; one that a
// live generation is writing (it holds the lock) is kept, and so is a fresh one whose writer
// may not have locked it yet.
func TestRemoveOrphanTemps(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * time.Minute)
	orphan := filepath.Join(dir, "dummy-tiny-v3.gguf.tmp-123")
	require.NoError(t, os.WriteFile(orphan, []byte("partial"), 0o644))
	require.NoError(t, os.Chtimes(orphan, old, old))
	fresh := filepath.Join(dir, "dummy-tiny-v3.gguf.tmp-456")
	require.NoError(t, os.WriteFile(fresh, []byte("just created"), 0o644))
	live, err := os.CreateTemp(dir, "dummy-tiny-v3.gguf.tmp-*")
	require.NoError(t, err)
	defer live.Close()
	require.NoError(t, syscall.Flock(int(live.Fd()), syscall.LOCK_EX|syscall.LOCK_NB))
	require.NoError(t, os.Chtimes(live.Name(), old, old))
	other := filepath.Join(dir, "notes.tmp-1")
	require.NoError(t, os.WriteFile(other, nil, 0o644))
	require.NoError(t, os.Chtimes(other, old, old))

	removeOrphanTemps(dir)
	require.NoFileExists(t, orphan)
	require.FileExists(t, fresh, "a temp file younger than a minute may not be locked yet")
	require.FileExists(t, live.Name())
	require.FileExists(t, other, "only dummy model temp files are touched")
}
