package audio

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
	win      []float32 // the reference window of the current block
	lastLag  int
	tracking bool // the last block had echo at lastLag
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
	if len(in) == 0 || e.refEnd <= p-int64(e.maxDelay) {
		e.Delay, e.Gain, e.tracking = 0, 0, false
		return in
	}
	// win[k] is the reference at input index p - maxDelay + k: copied out of the ring once, so
	// the correlations below index a plain slice.
	base := p - int64(e.maxDelay)
	e.win = e.win[:0]
	for k := int64(0); k < int64(e.maxDelay+len(in)); k++ {
		e.win = append(e.win, e.refAt(base+k))
	}
	var xx float64
	for _, v := range in {
		xx += float64(v) * float64(v)
	}
	if xx < echoQuietEnergy*float64(len(in)) {
		// Below −60 dBFS there is nothing for a VAD to hear: no search, and the last delay
		// stays tracked across the pause.
		e.Delay, e.Gain = 0, 0
		return in
	}
	lag, corr, ok := -1, 0.0, false
	if e.tracking {
		// The delay of a playback path drifts slowly: look near the last one first.
		lag, corr, ok = e.best(in, e.lastLag-echoTrackRadius, e.lastLag+echoTrackRadius, 1, echoTrackCorr)
	}
	if !ok {
		if lag, _, ok = e.best(in, 0, e.maxDelay, echoCoarseStep, echoMinCorr); ok {
			lag, corr, ok = e.best(in, lag-echoCoarseStep, lag+echoCoarseStep, 1, echoMinCorr)
		}
	}
	if !ok {
		e.Delay, e.Gain, e.tracking = 0, 0, false
		return in
	}
	// Least-squares gain at that lag, then subtract.
	ref := e.win[e.maxDelay-lag : e.maxDelay-lag+len(in)]
	var xr, rr float64
	for i, v := range in {
		xr += float64(v) * float64(ref[i])
		rr += float64(ref[i]) * float64(ref[i])
	}
	g := xr / rr // rr > 0: best only returns lags with reference energy
	e.Delay, e.Gain, e.lastLag, e.tracking = lag, g, lag, true
	e.residual = append(e.residual[:0], in...)
	if corr >= echoOnlyCorr {
		// The block is the echo and nothing else (user speech over it lowers the correlation):
		// silence, not a residual. Subtraction leaves what the single tap cannot model (the
		// client's resampling, the loudspeaker and the room), loud enough for a VAD.
		clear(e.residual)
		return e.residual
	}
	for i, r := range ref {
		e.residual[i] -= float32(g) * r
	}
	return e.residual
}

// Search parameters: the coarse search tries every echoCoarseStep-th lag on every
// echoCoarseStep-th sample; tracking tries every lag within echoTrackRadius of the last delay
// on every sample and keeps it when the correlation stays above echoTrackCorr.
const (
	echoQuietEnergy = 1e-6 // mean square of −60 dBFS
	echoCoarseStep  = 4
	echoTrackRadius = 16
	echoTrackCorr   = 0.5
)

// best returns the lag in [lo, hi] (clamped to [0, maxDelay], every step-th) whose reference
// (e.win) correlates best with in, sampling in every step-th sample; ok is false when none
// reaches minCorr (normalized correlation), so unrelated input is left untouched.
func (e *EchoCanceller) best(in []float32, lo, hi, step int, minCorr float64) (int, float64, bool) {
	lo, hi = max(lo, 0), min(hi, e.maxDelay)
	var xx float64
	for i := 0; i < len(in); i += step {
		xx += float64(in[i]) * float64(in[i])
	}
	if xx == 0 {
		return 0, 0, false
	}
	best, bestC := -1, minCorr
	for lag := lo; lag <= hi; lag += step {
		ref := e.win[e.maxDelay-lag : e.maxDelay-lag+len(in)]
		var xr, rr float64
		for i := 0; i < len(in); i += step {
			r := float64(ref[i])
			xr += float64(in[i]) * r
			rr += r * r
		}
		if rr == 0 || xr <= 0 {
			continue
		}
		if c := xr / math.Sqrt(xx*rr); c >= bestC {
			best, bestC = lag, c
		}
	}
	return best, bestC, best >= 0
}

// echoMinCorr is the normalized correlation below which a block is taken to hold no echo of
// the reference. Echo alone correlates near 1; echo under user speech of the same level still
// correlates about 0.7; unrelated speech stays under 0.2 on 100 ms blocks.
const echoMinCorr = 0.3

// echoOnlyCorr is the normalized correlation above which a block is taken to be echo alone and
// is silenced instead of subtracted. User speech as loud as the echo brings the correlation to
// about 0.45; user speech 6 dB under the echo to about 0.7; so both still reach the VAD, while a
// user much quieter than the loudspeaker's echo is taken for echo (the price of no adaptive
// filter).
const echoOnlyCorr = 0.8
