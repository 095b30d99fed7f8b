package bench

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQuantileNearestRank(t *testing.T) {
	t.Parallel()
	ten := []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}
	for _, tt := range []struct {
		name string
		v    []float64
		p    float64
		want float64
	}{
		{"p50 of an even count is the lower middle", ten, 50, 5},
		{"p90 of ten is the ninth", ten, 90, 9},
		{"p99 of ten is the largest", ten, 99, 10},
		{"p100 is the largest", ten, 100, 10},
		{"tiny p is the smallest", ten, 0.1, 1},
		{"p50 of an odd count is the middle", []float64{3, 1, 2}, 50, 2},
		{"one sample", []float64{7}, 99, 7},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Quantile(tt.v, tt.p))
		})
	}
	require.True(t, math.IsNaN(Quantile(nil, 50)))
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
