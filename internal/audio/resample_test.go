package audio

import (
	"fmt"
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
	for _, p := range [][2]int{{7999, 16000}, {16000, 48001}, {96000, 16000}, {0, 16000}, {16000, -1}} {
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

// streamChunks resamples in with a fresh Resampler fed chunkMs chunks, as a session's input or a
// response's output is, and returns the output with the filter flushed.
func streamChunks(t *testing.T, in []float32, from, to, chunkMs int) []float32 {
	t.Helper()
	r, err := NewResampler(from, to)
	require.NoError(t, err)
	per := from * chunkMs / 1000
	var got, buf []float32
	for off := 0; off < len(in); off += per {
		buf = r.Process(buf, in[off:min(off+per, len(in))])
		got = append(got, buf...)
	}
	return append(got, r.Flush(nil)...)
}

// maxSineError is the largest deviation of out from the ideal resampling of a 0.5-peak sine of
// freq Hz (the analytic sine at the output rate), away from the first and last 5 ms.
func maxSineError(out []float32, freq float64, rate, n int) float64 {
	worst := 0.0
	edge := rate / 200
	for i := edge; i < min(n, len(out))-edge; i++ {
		want := 0.5 * math.Sin(2*math.Pi*freq*float64(i)/float64(rate))
		worst = max(worst, math.Abs(float64(out[i])-want))
	}
	return worst
}

// Every rate from 8 to 48 kHz, common and odd, streamed in 20 ms chunks, matches the analytic
// resampling of a 0.5-peak sine as closely as one-shot resampling does (streaming is exact, so
// the chunk boundaries add nothing), and the error itself is small (the reference is exact).
func TestResamplerAnyRateQuality(t *testing.T) {
	froms := []int{8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 44099, 12345}
	for _, from := range froms {
		for _, to := range []int{16000, 24000, 8000} {
			t.Run(fmt.Sprintf("%d-%d", from, to), func(t *testing.T) {
				t.Parallel()
				const freq = 1000.0
				in := sine(freq, from, from/2) // 0.5 s at 0.5 peak
				n := (len(in)*to + from - 1) / from
				whole, err := Resample(in, from, to)
				require.NoError(t, err)
				require.Len(t, whole, n)
				chunked := streamChunks(t, in, from, to, 20)
				oneShotErr := maxSineError(whole, freq, to, n)
				chunkErr := maxSineError(chunked, freq, to, n)
				t.Logf("max error vs analytic sine: one-shot %.2e, 20 ms chunks %.2e", oneShotErr, chunkErr)
				require.InDelta(t, oneShotErr, chunkErr, 1e-5, "chunk boundaries add no error")
				require.Less(t, chunkErr, 2e-3)
			})
		}
	}
}

func BenchmarkResampler(b *testing.B) {
	for _, p := range [][2]int{{8000, 16000}, {24000, 16000}, {44100, 16000}, {48000, 16000}, {24000, 8000}, {44099, 16000}} {
		b.Run(fmt.Sprintf("%d-%d", p[0], p[1]), func(b *testing.B) {
			r, err := NewResampler(p[0], p[1])
			require.NoError(b, err)
			in := sine(1000, p[0], p[0]/50) // 20 ms chunks
			var dst []float32
			b.SetBytes(int64(4 * len(in)))
			for b.Loop() {
				dst = r.Process(dst, in)
			}
			// Real-time factor: seconds of CPU per second of audio.
			b.ReportMetric(float64(b.Elapsed().Seconds())/(float64(b.N)*0.02), "rtf")
		})
	}
}
