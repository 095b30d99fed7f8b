package speech

import "math"

// EchoCanceller removes the assistant's own voice from the microphone signal of a client that
// plays it through a loudspeaker without echo cancellation, so that the echo never looks like
// user speech to the barge-in VAD. The server knows exactly what it sent: each block of output
// audio is laid out on the input's sample clock from the moment it is sent (a client plays what
// it receives in order, at real-time rate), and the echo in the input is that reference delayed
// by an unknown 0..MaxDelayMs and scaled. For each input block the canceller finds the delay
// and gain that best explain the input (least squares, searched coarsely at 4 kHz and refined
// at 16 kHz) and subtracts the scaled reference. User speech is not correlated with the
// reference, so it survives in the residual; the VAD then hears the user and not the echo.
//
// It is a single-tap model: exact for a delayed, attenuated copy (a loudspeaker close to the
// microphone, a software loopback), approximate for a reverberant room, where the residual
// keeps the reverberation tail. The caller owns it; it is not safe for concurrent use.
type EchoCanceller struct {
	ref      []float32 // ring of reference samples on the input clock
	refEnd   int64     // input-clock index one past the newest reference sample
	inPos    int64     // input-clock index of the next input sample
	maxDelay int
	residual []float32
	dec      []float32 // decimated scratch
	decRef   []float32
	lastLag  int
	// Delay and gain of the last block with echo; tests and logs read them.
	Delay int
	Gain  float64
}

// echoRefCap is how much reference the ring keeps: the longest delay plus the longest block.
const echoRefCapMs = 2000

// NewEchoCanceller returns a canceller for 16 kHz audio that looks for echo delayed by up to
// maxDelayMs after the reference was sent.
func NewEchoCanceller(maxDelayMs int) *EchoCanceller {
	n := (echoRefCapMs + maxDelayMs) * ASRSampleRate / 1000
	return &EchoCanceller{ref: make([]float32, n), maxDelay: maxDelayMs * ASRSampleRate / 1000}
}

// Reference records 16 kHz output audio sent to the client now. It is placed after the previous
// reference when that is still playing, else at the current input position (the client starts
// playing a new burst when it receives it).
func (e *EchoCanceller) Reference(pcm []float32) {
	start := max(e.refEnd, e.inPos)
	size := int64(len(e.ref))
	// Between the old end and start nothing was playing: silence, not stale audio.
	for i := max(e.refEnd, start-size); i < start; i++ {
		e.ref[int(i%size)] = 0
	}
	if int64(len(pcm)) > size {
		start += int64(len(pcm)) - size
		pcm = pcm[int64(len(pcm))-size:]
	}
	for i, v := range pcm {
		e.ref[int((start+int64(i))%size)] = v
	}
	e.refEnd = start + int64(len(pcm))
}

// refAt returns the reference sample at input-clock index i (0 where none was sent).
func (e *EchoCanceller) refAt(i int64) float32 {
	if i < 0 || i >= e.refEnd || e.refEnd-i > int64(len(e.ref)) {
		return 0
	}
	return e.ref[int(i%int64(len(e.ref)))]
}

// Process takes the next block of 16 kHz microphone audio and returns it with the echo of the
// reference removed. The returned slice is reused by the next call. Without reference audio in
// reach, in is returned as it is.
func (e *EchoCanceller) Process(in []float32) []float32 {
	p := e.inPos
	e.inPos += int64(len(in))
	n := int64(len(in))
	// Any reference within [p-maxDelay, p+n)?
	lo := p - int64(e.maxDelay)
	if e.refEnd <= lo || len(in) == 0 {
		e.Delay, e.Gain = 0, 0
		return in
	}
	lag, ok := e.search(in, p)
	if !ok {
		e.Delay, e.Gain = 0, 0
		return in
	}
	// Least-squares gain at that lag, then subtract.
	var xr, rr float64
	for i := int64(0); i < n; i++ {
		r := float64(e.refAt(p + i - int64(lag)))
		xr += float64(in[i]) * r
		rr += r * r
	}
	if rr == 0 {
		return in
	}
	g := xr / rr
	if g <= 0 {
		e.Delay, e.Gain = 0, 0
		return in
	}
	e.Delay, e.Gain, e.lastLag = lag, g, lag
	e.residual = append(e.residual[:0], in...)
	for i := int64(0); i < n; i++ {
		e.residual[i] -= float32(g) * e.refAt(p+i-int64(lag))
	}
	return e.residual
}

// search finds the delay (in 16 kHz samples) whose reference best correlates with in: every
// 4th lag on a 4 kHz decimation, then ±4 samples at full rate around the best. ok is false when
// no lag correlates (normalized correlation below echoMinCorr), so unrelated input is untouched.
func (e *EchoCanceller) search(in []float32, p int64) (int, bool) {
	const step = 4
	n := len(in) / step
	e.dec = e.dec[:0]
	for i := 0; i < n; i++ {
		e.dec = append(e.dec, in[i*step])
	}
	// decRef[k] is the reference at input index p - maxDelay + k*step.
	base := p - int64(e.maxDelay)
	m := (e.maxDelay+len(in))/step + 1
	e.decRef = e.decRef[:0]
	for k := 0; k < m; k++ {
		e.decRef = append(e.decRef, e.refAt(base+int64(k*step)))
	}
	var xx float64
	for _, v := range e.dec {
		xx += float64(v) * float64(v)
	}
	if xx == 0 {
		return 0, false
	}
	best, bestC := -1, 0.0
	for lagK := 0; lagK*step <= e.maxDelay; lagK++ {
		// reference index for input i: p + i*step - lag = base + (maxDelay - lag) + i*step
		off := (e.maxDelay - lagK*step) / step
		var xr, rr float64
		for i, v := range e.dec {
			r := float64(e.decRef[off+i])
			xr += float64(v) * r
			rr += r * r
		}
		if rr == 0 || xr <= 0 {
			continue
		}
		if c := xr / math.Sqrt(xx*rr); c > bestC {
			best, bestC = lagK*step, c
		}
	}
	if best < 0 || bestC < echoMinCorr {
		return 0, false
	}
	// Refine at full rate.
	var fx float64
	for _, v := range in {
		fx += float64(v) * float64(v)
	}
	fine, fineC := best, 0.0
	for lag := max(0, best-step); lag <= min(e.maxDelay, best+step); lag++ {
		var xr, rr float64
		for i, v := range in {
			r := float64(e.refAt(p + int64(i) - int64(lag)))
			xr += float64(v) * r
			rr += r * r
		}
		if rr == 0 || xr <= 0 {
			continue
		}
		if c := xr / math.Sqrt(fx*rr); c > fineC {
			fine, fineC = lag, c
		}
	}
	return fine, true
}

// echoMinCorr is the normalized correlation below which a block is taken to hold no echo of
// the reference. Echo alone correlates near 1; echo under user speech of the same level still
// correlates about 0.7; unrelated speech stays under 0.2 on 100 ms blocks.
const echoMinCorr = 0.3
