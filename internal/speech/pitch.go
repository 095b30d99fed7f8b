package speech

import "math"

// Pitch evidence for an early speech decision. WebRTC VAD alone cannot tell a loud noise burst
// from speech (it flags white noise as voiced and its hangover stretches a 100 ms burst to a
// 180–210 ms voiced run), so a listener that must ignore such bursts has to wait for a longer
// run (the session's barge-in waited 240 ms). Voiced speech has what a noise burst has not: a
// pitch period. A frame is pitched when its normalized autocorrelation peaks at a lag of a
// voice's pitch period (2.5–12.5 ms, 80–400 Hz) above pitchMinCorr; white noise of 30 ms peaks
// around 0.15 over those lags, the vowels of real speech at 0.6–0.95.

const (
	pitchMinHz   = 80
	pitchMaxHz   = 400
	pitchMinCorr = 0.5
	// pitchMinPower is the mean square a pitched frame needs (−50 dBFS): below it the frame is
	// room noise or digital silence, whatever its correlation.
	pitchMinPower = 1e-5
)

// pitchEvidence grades one frame.
type pitchEvidence int

const (
	noPitch pitchEvidence = iota
	// pitchedPart: a pitch period, but the sound may fill only part of the frame (one half
	// holds at least 1/8 of the energy): the edge of a burst qualifies.
	pitchedPart
	// pitchedFull: a pitch period over the whole frame (each half holds at least 1/5 of the
	// energy): the sound is going on through the frame.
	pitchedFull
)

// pitched grades frame (int16 samples at rate Hz): does it have a voice's pitch period, and
// over the whole frame?
func pitched(frame []int16, rate int) pitchEvidence {
	n := len(frame)
	var e, h float64
	for i, s := range frame {
		x := float64(s)
		e += x * x
		if i < n/2 {
			h += x * x
		}
	}
	if e/float64(n) < pitchMinPower*32768*32768 {
		return noPitch
	}
	grade := pitchedFull
	switch bal := min(h, e-h) / e; {
	case bal < 1.0/8:
		return noPitch
	case bal < 1.0/5:
		grade = pitchedPart
	}
	minLag, maxLag := rate/pitchMaxHz, rate/pitchMinHz
	if maxLag >= n/2 {
		maxLag = n/2 - 1
	}
	// Energy of the head [0, n-lag) and of the tail [lag, n), updated as the lag grows.
	var head, tail float64
	for i := 0; i < n-minLag; i++ {
		x := float64(frame[i])
		head += x * x
	}
	for i := minLag; i < n; i++ {
		x := float64(frame[i])
		tail += x * x
	}
	for lag := minLag; lag <= maxLag; lag++ {
		var r float64
		for i := 0; i+lag < n; i++ {
			r += float64(frame[i]) * float64(frame[i+lag])
		}
		if d := math.Sqrt(head * tail); d > 0 && r/d >= pitchMinCorr {
			return grade
		}
		hd, tl := float64(frame[n-lag-1]), float64(frame[lag])
		head -= hd * hd
		tail -= tl * tl
	}
	return noPitch
}
