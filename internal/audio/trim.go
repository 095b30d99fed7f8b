package audio

import "math"

// TrimSilence returns the part of pcm (mono, at rate Hz) that keeps at most keepLeadMs of the
// silence before the first audible sample and at most keepTailMs after the last one. A sample
// is audible when its magnitude reaches thresholdDBFS (relative to full scale 1.0). All-silent
// input gives an empty slice. It returns a subslice of pcm and allocates nothing.
//
// flite starts every utterance with a ~200–300 ms pause and ends it with another; between two
// phrases of one reply that pause is prosody, but at the start of a reply it is dead air that a
// listener hears as latency.
func TrimSilence(pcm []float32, rate int, thresholdDBFS float64, keepLeadMs, keepTailMs int) []float32 {
	th := float32(math.Pow(10, thresholdDBFS/20))
	first, last := -1, -1
	for i, v := range pcm {
		if v >= th || v <= -th {
			first = i
			break
		}
	}
	if first < 0 {
		return pcm[:0]
	}
	for i := len(pcm) - 1; i >= first; i-- {
		if v := pcm[i]; v >= th || v <= -th {
			last = i
			break
		}
	}
	start := max(0, first-keepLeadMs*rate/1000)
	end := min(len(pcm), last+1+keepTailMs*rate/1000)
	return pcm[start:end]
}
