package gpu

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

// testCacheDir is shared by the package's tests so the dummy model is generated once.
var testCacheDir string

func TestMain(m *testing.M) {
	// llama.cpp logs through slog's default level; keep test output to warnings.
	slog.SetLogLoggerLevel(slog.LevelWarn)
	dir, err := os.MkdirTemp("", "engine-test-cache-")
	if err != nil {
		panic(err)
	}
	testCacheDir = dir
	// goleak.VerifyTestMain would os.Exit before a deferred RemoveAll ran: run, check, clean
	// up, then exit.
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(os.Stderr, "removing the test cache %s: %v\n", dir, err)
		code = 1
	}
	os.Exit(code)
}

// loadTiny loads dummy:tiny with small limits; the runner is closed when the test ends.
// Its replies do not end by themselves: the package's tests of the scheduler's mechanics
// (batching, overflow, rollback) need replies of the length they ask for. The dummy's own end
// is tested with it switched back on (dummyend_test.go); set before the first Generate, the
// scheduler reads it after taking that op under r.mu.
func loadTiny(t *testing.T, mod func(*Config)) *Runner {
	t.Helper()
	cfg := Config{Model: "dummy:tiny", CacheDir: testCacheDir, Device: "cpu", Threads: 1,
		ContextSize: 16 * 512, MaxSequences: 16, SeqContext: 512, PrefillChunk: 32, BatchSize: 256}
	if mod != nil {
		mod(&cfg)
	}
	r, err := Load(context.Background(), cfg, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	require.True(t, r.dummyEnd, "a dummy model's replies end by themselves")
	r.dummyEnd = false
	return r
}

// generate runs one Generate and returns its tokens and text.
func generate(t *testing.T, s *Sequence, opts GenerateOptions) ([]int, string, GenerateResult) {
	t.Helper()
	var toks []int
	var text string
	res, err := s.Generate(context.Background(), opts, func(p Piece) error {
		if p.Token >= 0 {
			toks = append(toks, p.Token)
		}
		text += p.Text
		return nil
	})
	require.NoError(t, err)
	return toks, text, res
}

func testRNG() *rand.Rand { return rand.New(rand.NewPCG(7, 7)) }
