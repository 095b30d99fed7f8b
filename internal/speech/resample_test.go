package speech

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func sine(freq float64, rate, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(0.5 * math.Sin(2*math.Pi*freq*float64(i)/float64(rate)))
	}
	return s
}

// TestResampleSine checks every rate pair: a 1 kHz tone keeps its frequency, phase and level
// (output n is aligned with input time n·from/to), and the length is ceil(n·to/from).
func TestResampleSine(t *testing.T) {
	rates := []int{8000, 16000, 24000, 48000}
	for _, from := range rates {
		for _, to := range rates {
			in := sine(1000, from, from/2) // 0.5 s
			out, err := Resample(in, from, to)
			require.NoError(t, err)
			require.Len(t, out, (len(in)*to+from-1)/from, "%d→%d", from, to)
			want := sine(1000, to, len(out))
			// Ignore the edges, where the filter sees the zero padding.
			maxErr := 0.0
			for i := len(out) / 10; i < len(out)*9/10; i++ {
				maxErr = max(maxErr, math.Abs(float64(out[i]-want[i])))
			}
			require.Less(t, maxErr, 0.01, "%d→%d max error", from, to)
		}
	}
}

// TestResampleRejectsAlias: a 6 kHz tone cannot exist at 8 kHz and must be filtered out.
func TestResampleRejectsAlias(t *testing.T) {
	out, err := Resample(sine(6000, 48000, 48000), 48000, 8000)
	require.NoError(t, err)
	rms := 0.0
	for _, v := range out[800:7200] {
		rms += float64(v) * float64(v)
	}
	rms = math.Sqrt(rms / 6400)
	require.Less(t, rms, 0.5/math.Sqrt2*0.01, "stop band below -40 dB")
}

func TestResamplerStreamingMatchesOneShot(t *testing.T) {
	in := sine(440, 16000, 16000)
	whole, err := Resample(in, 16000, 24000)
	require.NoError(t, err)
	r, err := NewResampler(16000, 24000)
	require.NoError(t, err)
	var got []float32
	buf := make([]float32, 0, 2048)
	for off := 0; off < len(in); off += 321 {
		buf = r.Process(buf, in[off:min(off+321, len(in))])
		got = append(got, buf...)
	}
	got = append(got, r.Flush(nil)...)
	require.GreaterOrEqual(t, len(got), len(whole))
	require.InDeltaSlice(t, whole, got[:len(whole)], 1e-6)
}

func TestResamplerErrorsAndAllocs(t *testing.T) {
	for _, p := range [][2]int{{44100, 16000}, {16000, 22050}, {0, 16000}, {16000, -1}} {
		_, err := NewResampler(p[0], p[1])
		require.ErrorIs(t, err, ErrUnsupportedRate, "%v", p)
		_, err = Resample([]float32{0}, p[0], p[1])
		require.ErrorIs(t, err, ErrUnsupportedRate, "%v", p)
	}
	r, err := NewResampler(16000, 24000)
	require.NoError(t, err)
	in := sine(300, 16000, 1600)
	dst := r.Process(nil, in)
	allocs := testing.AllocsPerRun(50, func() { dst = r.Process(dst, in) })
	require.Zero(t, allocs)
	require.Len(t, dst, 2400)
}
