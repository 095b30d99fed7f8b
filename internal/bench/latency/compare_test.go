package latency

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// With --compare-tools each run measures both settings, alternating which goes first, and the
// ratio figures divide the medians; without it nothing changes.
func TestCompareTools(t *testing.T) {
	require.Equal(t, variants{{tools: 3}}, Options{Tools: 3}.variants())
	require.Empty(t, Options{Tools: 3}.compareFigures(map[string][]float64{}, nil))
	vs := Options{Tools: 3, CompareTools: true}.variants()
	for _, tc := range []struct {
		run  int
		want []int
	}{{0, []int{3, 0}}, {1, []int{0, 3}}, {2, []int{3, 0}}} {
		var got []int
		for _, v := range vs.order(tc.run) {
			got = append(got, v.tools)
		}
		require.Equal(t, tc.want, got, "run %d", tc.run)
	}
	require.Equal(t, "_notools", vs[1].suffix)
	res := map[string][]float64{
		"commit_to_audible": {100, 110, 300}, "commit_to_audible_notools": {100, 100, 90},
		"commit_to_audible_first": {60}, "commit_to_audible_first_notools": {50},
		"commit_to_audible_later": {50}, "commit_to_audible_later_notools": {40},
		"speech_end_to_audible": {500}, "speech_end_to_audible_notools": {500},
	}
	figs := Options{Tools: 3, CompareTools: true}.compareFigures(res, map[string]string{})
	ratios := map[string]float64{}
	for _, f := range figs {
		if f.Unit == "ratio" {
			ratios[f.Name] = f.Samples[0]
		}
	}
	require.InDelta(t, 1.1, ratios["lat_commit_to_audible_tools_ratio"], 1e-9)
	require.InDelta(t, 1.2, ratios["lat_commit_to_audible_first_tools_ratio"], 1e-9)
	require.InDelta(t, 1.25, ratios["lat_commit_to_audible_later_tools_ratio"], 1e-9)
	require.InDelta(t, 1.0, ratios["lat_speech_end_to_audible_tools_ratio"], 1e-9)
	require.False(t, math.IsNaN(ratios["lat_commit_to_audible_tools_ratio"]))
}
