package audio

import (
	"fmt"
	"math"
)

// Resampler converts a mono stream between any two rates from MinRate to MaxRate (8 to 48 kHz,
// 44.1 / 22.05 / 11.025 kHz included) with a polyphase windowed-sinc FIR filter (Kaiser window,
// 8 zero crossings each side, cutoff at 92 % of the lower Nyquist frequency). It keeps filter
// history between calls, so a stream fed in chunks of any size gives exactly the samples of
// resampling it in one piece; it is not safe for concurrent use. Keep one per stream: a session's
// input, a response's output, a chat request.
//
// When the reduced ratio to/from has at most maxExactPhases phases (every common rate pair), each
// output uses the exact phase; otherwise the filter is tabulated at interpPhases fractional
// positions and each output interpolates linearly between the two nearest (as speexdsp does).
//
// Output sample n is aligned with input time n·from/to (the filter's group delay is absorbed by
// starting the phase at the filter centre), so the stream's output lags its input by half the
// filter length (about 0.5 ms) until Flush.
type Resampler struct {
	from, to int
	up, down int         // to/from reduced: up = L, down = M
	taps     int         // taps per phase (K)
	nphase   int         // rows of phases used per output position: up (exact) or interpPhases
	interp   bool        // phases has nphase+1 rows and outputs interpolate between two
	phases   [][]float32 // phases[p][j] = h(p/nphase + K-1-j), reversed for a forward dot product
	hist     []float32   // the last K-1 input samples, zero at start
	work     []float32   // hist followed by the current input, reused between calls
	t        int         // upsampled time of the next output relative to the current input start
}

// Rates a Resampler accepts.
const (
	MinRate = 8000
	MaxRate = 48000
)

const (
	maxExactPhases = 1024
	interpPhases   = 512
)

// supportedRate reports whether r is in the range a Resampler handles.
func supportedRate(r int) bool { return r >= MinRate && r <= MaxRate }

// NewResampler returns a streaming converter between two rates in [MinRate, MaxRate]; other rates
// give ErrUnsupportedRate.
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
	ratio := max(1, float64(from)/float64(to)) // input samples per zero crossing
	r.taps = int(math.Ceil(2 * zeroCrossings * ratio))
	fc := 0.5 / ratio * 0.92 // cycles per input sample
	centre := float64(r.taps) / 2
	const beta = 7.5
	i0b := besselI0(beta)
	h := func(x float64) float64 { // x in input samples from the window's start
		d := x - centre
		s := 2 * fc
		if d != 0 {
			s = math.Sin(2*math.Pi*fc*d) / (math.Pi * d)
		}
		w := d / centre
		if w*w > 1 {
			return 0
		}
		return s * besselI0(beta*math.Sqrt(1-w*w)) / i0b
	}
	r.nphase = r.up
	rows := r.up
	if r.up > maxExactPhases {
		r.nphase, rows, r.interp = interpPhases, interpPhases+1, true
	}
	r.phases = make([][]float32, rows)
	row := make([]float64, r.taps)
	for p := range r.phases {
		sum := 0.0
		for j := range row {
			row[j] = h(float64(p)/float64(r.nphase) + float64(r.taps-1-j))
			sum += row[j]
		}
		ph := make([]float32, r.taps)
		for j, v := range row {
			// Each phase is normalised to unit DC gain so constant input stays constant.
			ph[j] = float32(v / sum)
		}
		r.phases[p] = ph
	}
	r.hist = make([]float32, r.taps-1)
	r.t = r.taps * r.up / 2 // start at the filter centre: output 0 lines up with input 0
	return r, nil
}

// Rates returns the input and output rates.
func (r *Resampler) Rates() (from, to int) { return r.from, r.to }

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
		i := t / r.up        // newest input index used by this output
		x := r.work[i : i+k] // inputs i-K+1 .. i, shifted by the K-1 history samples
		if !r.interp {
			dst[o] = dot(r.phases[t%r.up], x)
		} else {
			pos := (t % r.up) * r.nphase
			p, frac := pos/r.up, float32(pos%r.up)/float32(r.up)
			a := dot(r.phases[p], x)
			dst[o] = a + frac*(dot(r.phases[p+1], x)-a)
		}
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

// ResampledLen is the length Resample gives for n samples: ceil(n·to/from).
func ResampledLen(n, from, to int) int {
	g := gcd(from, to)
	up, down := to/g, from/g
	return (n*up + down - 1) / down
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

func dot(c, x []float32) float32 {
	x = x[:len(c)]
	var acc float32
	for j, v := range c {
		acc += v * x[j]
	}
	return acc
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
