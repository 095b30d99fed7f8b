package latency

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestParseStatCPU: utime + stime, counted from the command name's ')' (which may hold spaces
// and parentheses), in USER_HZ ticks.
func TestParseStatCPU(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, stat string
		want       time.Duration
		err        bool
	}{
		{"plain", "42 (omniserve) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 0 0", 3 * time.Second, false},
		{"name with spaces and )", "7 (a b) c) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 1 0 0", 30 * time.Millisecond, false},
		{"truncated", "7 (x) R 1 2", 0, true},
		{"no name", "garbage", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStatCPU(tt.stat)
			if tt.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestMeasureCPU: a batch that does CPU work in this process shows it; a failing session fails
// the batch. The work is a fixed amount (hashing), not a wall-clock spin, so that a loaded
// machine does not shrink it.
func TestMeasureCPU(t *testing.T) {
	buf := make([]byte, 1<<20)
	work := func(context.Context) error {
		for range 64 { // 64 MiB of SHA-256: tens of ms of CPU on any machine
			sha256.Sum256(buf)
		}
		return nil
	}
	start := time.Now()
	b, err := measureCPU(context.Background(), os.Getpid(), 2, work)
	require.NoError(t, err)
	require.Equal(t, 2, b.n)
	require.GreaterOrEqual(t, b.cpu, 20*time.Millisecond, "two sessions hashing 64 MiB each")
	require.LessOrEqual(t, b.wall, time.Since(start))
	require.InDelta(t, ms(b.cpu)/2, b.perSession(), 0.001)
	t.Logf("%v of CPU over %v", b.cpu, b.wall)
	_, err = measureCPU(context.Background(), os.Getpid(), 2, func(context.Context) error { return errors.New("refused") })
	require.ErrorContains(t, err, "refused")
}
