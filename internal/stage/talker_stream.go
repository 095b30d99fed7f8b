package stage

import (
	"context"
	"math"
)

// ttsStreamer is a ttsBackend that hands a phrase's audio on as it is synthesized (the remote
// TTS reading a streamed /v1/audio/speech): the talker sends each piece at once instead of
// waiting for the whole phrase.
type ttsStreamer interface {
	SynthesizeStream(ctx context.Context, text string, emit func(pcm []float32) error) error
}

// phraseTrimmer is audio.TrimSilence for a phrase that arrives in pieces: the leading silence
// is dropped but its last lead samples, and silence after speech is held back until more
// speech follows (then it goes out whole: a pause inside the phrase) or the phrase ends (then
// tail samples of it go out). The concatenated output equals TrimSilence of the whole phrase.
type phraseTrimmer struct {
	th         float32
	lead, tail int
	started    bool      // speech was heard
	pre        []float32 // before speech: the last lead samples of silence
	held       []float32 // after speech: the silence since its last loud sample
}

func newPhraseTrimmer(rate int, thresholdDBFS float64, leadMs, tailMs int) *phraseTrimmer {
	return &phraseTrimmer{th: float32(math.Pow(10, thresholdDBFS/20)), lead: leadMs * rate / 1000, tail: tailMs * rate / 1000}
}

func (p *phraseTrimmer) loud(v float32) bool { return v >= p.th || v <= -p.th }

// push takes the next piece and returns the audio that can go out now (nil: none yet).
func (p *phraseTrimmer) push(pcm []float32) []float32 {
	var out []float32
	if !p.started {
		first := -1
		for i, v := range pcm {
			if p.loud(v) {
				first = i
				break
			}
		}
		if first < 0 {
			p.pre = lastN(append(p.pre, pcm...), p.lead)
			return nil
		}
		p.started = true
		out = append(out, lastN(append(p.pre, pcm[:first]...), p.lead)...)
		p.pre = nil
		pcm = pcm[first:]
	}
	last := -1
	for i := len(pcm) - 1; i >= 0; i-- {
		if p.loud(pcm[i]) {
			last = i
			break
		}
	}
	if last < 0 {
		p.held = append(p.held, pcm...)
		return out
	}
	out = append(out, p.held...)
	out = append(out, pcm[:last+1]...)
	p.held = append(p.held[:0], pcm[last+1:]...)
	return out
}

// end returns the phrase's kept trailing silence (nil when it had no speech).
func (p *phraseTrimmer) end() []float32 {
	if !p.started {
		return nil
	}
	return p.held[:min(len(p.held), p.tail)]
}

// lastN is the last n samples of s (all of s when shorter).
func lastN(s []float32, n int) []float32 { return s[max(0, len(s)-n):] }
