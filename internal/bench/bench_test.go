package bench

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFigureSummary checks that the printed summaries use benchreport's nearest-rank quantile
// (its table test is there) and leave the samples in measurement order.
func TestFigureSummary(t *testing.T) {
	t.Parallel()
	ten := []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}
	f := Figure{Samples: ten}
	for st, want := range map[Stat]float64{P50: 5, P90: 9, P99: 10, Max: 10, Min: 1, Value: 1} {
		require.Equal(t, want, f.Summary(st), st)
	}
	require.True(t, math.IsNaN(Figure{}.Summary(P50)))
	require.Equal(t, []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, ten, "the samples are not reordered")
}

func TestResultPrint(t *testing.T) {
	t.Parallel()
	r := &Result{Bench: "x", CPUs: 2}
	r.Add(Figure{Name: "lat_ms", Samples: []float64{3, 1, 2, 4}, Keys: []Stat{P50, P99}, Digits: 1},
		Figure{Name: "best_tok_s", Samples: []float64{20.5, 22.25}, Keys: []Stat{Max}, Digits: 2},
		One("sessions", "sessions", "", 16, 0),
		Figure{Name: "first_audio_ms", Samples: []float64{30, 10, 20}, Keys: []Stat{P50}, Bare: true, Digits: 0},
		Figure{Name: "data_only", Samples: []float64{1}})
	var b strings.Builder
	require.NoError(t, r.Print(&b))
	require.Equal(t, "cpus=2\nlat_ms_p50=2.0\nlat_ms_p99=4.0\nbest_tok_s=22.25\nsessions=16\nfirst_audio_ms=20\n", b.String())
}
