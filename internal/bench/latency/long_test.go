package latency

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseVmRSS(t *testing.T) {
	tests := []struct {
		name, status string
		want         int64
		err          bool
	}{
		{"a status", "Name:\tomniserve\nVmPeak:\t  900000 kB\nVmRSS:\t  204800 kB\nRssAnon:\t 1 kB\n", 204800, false},
		{"no VmRSS", "Name:\tomniserve\n", 0, true},
		{"empty VmRSS", "VmRSS:\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseVmRSS(tt.status)
			if tt.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// The ratio compares the median of the last ten turns with the first ten's; deletions and
// failures are counted.
func TestLongFigures(t *testing.T) {
	r := longRun{o: LongOptions{Turns: 20}, early: 2, rssEarly: 100, rssFinal: 103.5}
	for i := range 20 {
		lat := 100.0
		if i >= 10 {
			lat = 110
		}
		r.turns = append(r.turns, longTurn{latency: lat, deleted: map[bool]int{true: 4}[i == 15]})
	}
	got := map[string]float64{}
	for _, f := range r.figures() {
		got[f.Name] = f.Samples[len(f.Samples)-1]
	}
	require.InDelta(t, 1.1, got["long_turn_latency_ratio_20"], 1e-9)
	require.InDelta(t, 3.5, got["long_rss_growth_mib"], 1e-9)
	require.Equal(t, 4.0, got["long_items_deleted"])
	require.Equal(t, 1.0, got["long_truncations"])
	require.Equal(t, 0.0, got["long_turns_failed"])
}

func TestTruncationValue(t *testing.T) {
	v, err := truncationValue("auto")
	require.NoError(t, err)
	require.Equal(t, "auto", v)
	v, err = truncationValue(`{"type":"retention_ratio","retention_ratio":0.5}`)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"type": "retention_ratio", "retention_ratio": 0.5}, v)
	_, err = truncationValue("sometimes")
	require.Error(t, err)
}
