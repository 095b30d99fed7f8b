package latency

import (
	"context"
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

// TestMeasureCPU: a batch that burns CPU in this process shows it; a failing session fails the
// batch.
func TestMeasureCPU(t *testing.T) {
	burn := func(context.Context) error {
		for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		}
		return nil
	}
	b, err := measureCPU(context.Background(), os.Getpid(), 2, burn)
	require.NoError(t, err)
	require.Equal(t, 2, b.n)
	require.Greater(t, b.cpu, 250*time.Millisecond, "two goroutines spinning 300 ms each")
	require.Greater(t, b.perSession(), 100.0)
	_, err = measureCPU(context.Background(), os.Getpid(), 2, func(context.Context) error { return errors.New("refused") })
	require.ErrorContains(t, err, "refused")
}
