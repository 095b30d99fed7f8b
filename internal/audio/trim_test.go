package audio

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTrimSilence(t *testing.T) {
	const rate = 1000 // 1 sample per ms keeps the arithmetic readable
	tone := func(n int) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = 0.5 * float32(math.Sin(float64(i)+1)) // never 0: every sample audible
		}
		return s
	}
	join := func(parts ...[]float32) []float32 {
		var out []float32
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	quiet := func(n int) []float32 { s := make([]float32, n); s[n/2] = 0.001; return s } // −60 dBFS
	tests := []struct {
		name           string
		in             []float32
		lead, tail     int
		wantLen, start int
	}{
		{"lead and tail cut to zero", join(quiet(300), tone(100), quiet(200)), 0, 0, 100, 300},
		{"lead kept up to 50", join(quiet(300), tone(100), quiet(200)), 50, 0, 150, 250},
		{"tail kept up to 80", join(quiet(300), tone(100), quiet(200)), 0, 80, 180, 300},
		{"keep more than there is", join(quiet(30), tone(100), quiet(20)), 100, 100, 150, 0},
		{"no silence", tone(100), 0, 0, 100, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := TrimSilence(tt.in, rate, -40, tt.lead, tt.tail)
			require.Len(t, got, tt.wantLen)
			require.Equal(t, tt.in[tt.start:tt.start+tt.wantLen], got)
		})
	}
	require.Empty(t, TrimSilence(quiet(100), rate, -40, 10, 10), "all silent")
	require.Empty(t, TrimSilence(nil, rate, -40, 10, 10))
}
