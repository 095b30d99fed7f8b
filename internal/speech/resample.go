package speech

import (
	"fmt"
	"math"
)

// Resampler converts a mono stream between two of the rates 8, 16, 24 and 48 kHz with a
// polyphase windowed-sinc FIR filter. It keeps filter history between calls, so a stream can be
// fed in chunks of any size; it is not safe for concurrent use.
//
// Output sample n is aligned with input time n·from/to (the filter's group delay is absorbed by
// starting the phase at the filter centre), so the stream's output lags its input by half the
// filter length (about 0.5 ms at the ratios used here) until Flush.
type Resampler struct {
	from, to int
	up, down int         // to/from reduced: up = L, down = M
	taps     int         // taps per phase (K)
	phases   [][]float32 // phases[p][j] = h[p + (K-1-j)·L], reversed for a forward dot product
	hist     []float32   // the last K-1 input samples, zero at start
	work     []float32   // hist followed by the current input, reused between calls
	t        int         // upsampled time of the next output relative to the current input start
}

// supportedRate reports whether r is one of the rates the realtime API uses.
func supportedRate(r int) bool {
	switch r {
	case 8000, 16000, 24000, 48000:
		return true
	}
	return false
}

// NewResampler returns a streaming converter from one supported rate to another (8000, 16000,
// 24000 or 48000 Hz); other rates give ErrUnsupportedRate.
func NewResampler(from, to int) (*Resampler, error) {
	if !supportedRate(from) || !supportedRate(to) {
		return nil, fmt.Errorf("resampling %d Hz to %d Hz: %w", from, to, ErrUnsupportedRate)
	}
	g := gcd(from, to)
	r := &Resampler{from: from, to: to, up: to / g, down: from / g}
	if r.up == r.down {
		return r, nil
	}
	// Eight zero crossings each side of the slower rate's Nyquist keep the stop band below
	// about -70 dB; the cutoff sits just under the lower of the two Nyquist frequencies.
	const zeroCrossings = 8
	maxLM := max(r.up, r.down)
	r.taps = 2 * zeroCrossings * maxLM / r.up
	n := r.taps * r.up
	centre := float64(n) / 2
	fc := 0.5 / float64(maxLM) * 0.92 // cycles per upsampled sample
	const beta = 7.5
	i0b := besselI0(beta)
	h := make([]float64, n)
	for j := range h {
		x := float64(j) - centre
		s := 2 * fc
		if x != 0 {
			s = math.Sin(2*math.Pi*fc*x) / (math.Pi * x)
		}
		w := (float64(j) - centre) / centre
		win := 0.0
		if w*w <= 1 {
			win = besselI0(beta*math.Sqrt(1-w*w)) / i0b
		}
		h[j] = s * win
	}
	r.phases = make([][]float32, r.up)
	for p := range r.phases {
		ph := make([]float32, r.taps)
		sum := 0.0
		for k := range r.taps {
			sum += h[p+k*r.up]
		}
		for j := range r.taps {
			// Each phase is normalised to unit DC gain so constant input stays constant.
			ph[j] = float32(h[p+(r.taps-1-j)*r.up] / sum)
		}
		r.phases[p] = ph
	}
	r.hist = make([]float32, r.taps-1)
	r.t = n / 2 // start at the filter centre: output 0 lines up with input 0
	return r, nil
}

// Process resamples src into dst (reusing dst's storage from index 0) and returns the output.
// No allocation happens once dst and the internal buffer have grown to the chunk size.
func (r *Resampler) Process(dst, src []float32) []float32 {
	if r.up == r.down {
		dst = grow(dst, len(src))
		copy(dst, src)
		return dst
	}
	k := r.taps
	r.work = grow(r.work, k-1+len(src))
	copy(r.work, r.hist)
	copy(r.work[k-1:], src)
	limit := len(src) * r.up
	// Count the outputs first so dst is sized once.
	n := 0
	if r.t < limit {
		n = (limit-r.t-1)/r.down + 1
	}
	dst = grow(dst, n)
	t := r.t
	for o := range n {
		i := t / r.up // newest input index used by this output
		ph := r.phases[t%r.up]
		x := r.work[i : i+k] // inputs i-K+1 .. i, shifted by the K-1 history samples
		var acc float32
		for j, c := range ph {
			acc += c * x[j]
		}
		dst[o] = acc
		t += r.down
	}
	r.t = t - limit
	copy(r.hist, r.work[len(r.work)-(k-1):])
	return dst
}

// Flush returns the outputs still held back by the filter delay, as if the stream were followed
// by silence, and resets the stream.
func (r *Resampler) Flush(dst []float32) []float32 {
	if r.up == r.down {
		return dst[:0]
	}
	pad := make([]float32, r.taps/2+1)
	dst = r.Process(dst, pad)
	r.Reset()
	return dst
}

// Reset clears the filter history so the Resampler can start a new stream.
func (r *Resampler) Reset() {
	if r.up == r.down {
		return
	}
	clear(r.hist)
	r.t = r.taps * r.up / 2
}

// Resample converts a whole clip; the result has ceil(len(src)·to/from) samples, aligned with
// the input.
func Resample(src []float32, from, to int) ([]float32, error) {
	r, err := NewResampler(from, to)
	if err != nil {
		return nil, err
	}
	want := (len(src)*r.up + r.down - 1) / r.down
	out := r.Process(make([]float32, 0, want+r.up), src)
	if r.up != r.down {
		out = append(out, r.Flush(nil)...)
	}
	return out[:min(want, len(out))], nil
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// besselI0 is the zeroth-order modified Bessel function of the first kind (series form), used by
// the Kaiser window.
func besselI0(x float64) float64 {
	sum, term := 1.0, 1.0
	for k := 1; k < 50; k++ {
		term *= (x / (2 * float64(k))) * (x / (2 * float64(k)))
		sum += term
		if term < 1e-12*sum {
			break
		}
	}
	return sum
}
