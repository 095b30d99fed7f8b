package metrics

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The engine-output goroutine accumulates while the session goroutine finalizes: exactly one
// finalize wins, nothing races, and snapshots after finalize are ignored.
func TestConcurrentAccumulateAndFinalize(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(1)
	turn := newTurn(metricsRID, "resp-conc", 0, 1, 2, clk.now)
	var wg sync.WaitGroup
	wins := make(chan bool, 4)
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				turn.Accumulate(g%2, StageRequestStats{NumTokensOut: 1, VllmItlsMs: []float64{1}}, "text", 0)
				turn.AddTransfer(0, 1, 1, 0.1, 0, false)
				if i == 100 {
					wins <- turn.Finalize(ReasonStop, nil, true)
				}
			}
		})
	}
	wg.Wait()
	close(wins)
	n := 0
	for w := range wins {
		if w {
			n++
		}
	}
	require.Equal(t, 1, n)
	rec, ok := turn.Record()
	require.True(t, ok)
	var out int
	for _, s := range rec.Stages {
		out += s.NumTokensOut
	}
	require.Equal(t, int64(out), rec.E2E.E2ETotalTokens)
	require.Equal(t, turn.SegmentCount(), out, "every accumulated segment is in the collapsed rows")
}
