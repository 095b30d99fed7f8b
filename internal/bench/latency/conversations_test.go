package latency

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStepKeepsUp: each keep-up rule fails a step on its own, and the reason names it.
func TestStepKeepsUp(t *testing.T) {
	t.Parallel()
	good := func() stepResult {
		return stepResult{n: 4, audible: []float64{500, 620, 790}, bargeIn: []float64{120, 250}, late: []float64{3, 40}, turns: 3}
	}
	tests := []struct {
		name   string
		mutate func(*stepResult)
		want   string // "" = keeps up
	}{
		{"all rules hold", func(*stepResult) {}, ""},
		{"an error", func(r *stepResult) { r.errs = []string{"server error: x"} }, "error: server error: x"},
		{"no turn", func(r *stepResult) { r.turns = 0 }, "no turn completed"},
		{"a wrong transcript", func(r *stepResult) { r.wrongTranscripts = 1 }, "1 transcripts differ from the reference"},
		{"slow first audio", func(r *stepResult) { r.audible = append(r.audible, 801) }, "speech end → first audible p99 801 ms > 800 ms"},
		{"slow barge-in", func(r *stepResult) { r.bargeIn = append(r.bargeIn, 301) }, "barge-in onset → silence p99 301 ms > 300 ms"},
		{"a late append", func(r *stepResult) { r.late = append(r.late, 401) }, "an append went 401 ms behind the microphone's clock"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := good()
			tc.mutate(&r)
			ok, why := r.keepsUp(500)
			require.Equal(t, tc.want == "", ok)
			require.Equal(t, tc.want, why)
		})
	}
}

// TestReferenceTranscripts: a clip's first transcript is its reference; later ones are
// compared with it, case and spacing aside.
func TestReferenceTranscripts(t *testing.T) {
	t.Parallel()
	r := &convRun{refs: map[int]string{}}
	require.True(t, r.reference(0, "Go forward ten meters"))
	require.True(t, r.reference(0, " go  forward ten METERS "))
	require.False(t, r.reference(0, "go forward two meters"))
	require.True(t, r.reference(-1, "one two three"), "each clip has its own reference")
}
