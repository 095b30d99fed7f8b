package speech

/*
#cgo pkg-config: speexdsp
#include <stdlib.h>
#include <speex/speex_preprocess.h>

static int omni_preprocess_set_int(SpeexPreprocessState *st, int req, int v) {
	return speex_preprocess_ctl(st, req, &v);
}
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Noise reduction kinds, as OpenAI's audio.input.noise_reduction.type names them.
const (
	NoiseNearField = "near_field" // a close-talking microphone: headset, handset
	NoiseFarField  = "far_field"  // a laptop or room microphone: more noise, lower speech level
)

// denoiseFrameMs is the preprocessor's frame: 20 ms, the frame speex's noise estimator is tuned
// for at 16 kHz (320 samples).
const denoiseFrameMs = 20

// Suppression of the noise estimate, in dB. Mild on purpose: speex's default (-15 dB) and
// harsher settings left artefacts that cost the ASR more words than the noise itself
// (docs/BENCHMARKS.md, TestDenoiseWordAccuracy). A far-field microphone picks up more room
// noise relative to speech, so it is suppressed harder.
var noiseSuppressDB = map[string]int{NoiseNearField: -6, NoiseFarField: -10}

// Denoiser is a streaming noise suppressor (speexdsp's preprocessor: spectral subtraction over
// a running noise estimate). It adapts to the noise as audio flows, so one Denoiser serves one
// stream; Reset returns it to its initial state. Its overlap-add delays the audio by one frame
// (20 ms): the stream keeps its length, and the last 20 ms stay in the filter. Not safe for
// concurrent use.
type Denoiser struct {
	st    *C.SpeexPreprocessState
	kind  string
	rate  int
	frame int
	buf   []int16 // a partial frame carried to the next Process
	pcm16 []int16 // ProcessFloat's conversion buffer, reused
	cbuf  *C.spx_int16_t
}

// NewDenoiser returns a denoiser of kind (NoiseNearField or NoiseFarField) for mono audio at
// rate Hz (8000, 16000, 24000, 32000 or 48000).
func NewDenoiser(kind string, rate int) (*Denoiser, error) {
	if _, ok := noiseSuppressDB[kind]; !ok {
		return nil, fmt.Errorf("noise reduction %q (want %s or %s): %w", kind, NoiseNearField, NoiseFarField, ErrInvalidConfig)
	}
	switch rate {
	case 8000, 16000, 24000, 32000, 48000:
	default:
		return nil, fmt.Errorf("noise reduction at %d Hz: %w", rate, ErrInvalidConfig)
	}
	d := &Denoiser{kind: kind, rate: rate, frame: rate * denoiseFrameMs / 1000}
	d.cbuf = (*C.spx_int16_t)(C.malloc(C.size_t(d.frame) * C.size_t(unsafe.Sizeof(C.spx_int16_t(0)))))
	if err := d.init(); err != nil {
		C.free(unsafe.Pointer(d.cbuf))
		return nil, err
	}
	runtime.SetFinalizer(d, (*Denoiser).Close)
	return d, nil
}

func (d *Denoiser) init() error {
	st := C.speex_preprocess_state_init(C.int(d.frame), C.int(d.rate))
	if st == nil {
		return fmt.Errorf("speex preprocessor for %d-sample frames at %d Hz: %w", d.frame, d.rate, ErrInvalidConfig)
	}
	C.omni_preprocess_set_int(st, C.SPEEX_PREPROCESS_SET_DENOISE, 1)
	C.omni_preprocess_set_int(st, C.SPEEX_PREPROCESS_SET_NOISE_SUPPRESS, C.int(noiseSuppressDB[d.kind]))
	// Level and voice decisions stay with the session's VAD and the ASR: only noise is removed.
	C.omni_preprocess_set_int(st, C.SPEEX_PREPROCESS_SET_AGC, 0)
	C.omni_preprocess_set_int(st, C.SPEEX_PREPROCESS_SET_DEREVERB, 0)
	d.st = st
	return nil
}

// Kind is the denoiser's noise reduction type.
func (d *Denoiser) Kind() string { return d.kind }

// Process denoises pcm (mono PCM16 at the denoiser's rate) in place, 20 ms at a time. A
// trailing partial frame is held back and denoised with the next call; its samples in pcm are
// returned as they came (Flush would only matter at the end of a stream, where the last < 20 ms
// carry no speech worth the delay). The returned slice is pcm's denoised prefix plus the
// remainder unchanged, so the stream keeps its length and timing.
func (d *Denoiser) Process(pcm []int16) []int16 {
	if d.st == nil || len(pcm) == 0 {
		return pcm
	}
	out := pcm
	i := 0
	if len(d.buf) > 0 {
		// Complete the carried frame; its first part was already passed on, so only the
		// samples of this call that it now covers are replaced.
		need := d.frame - len(d.buf)
		if len(pcm) < need {
			d.buf = append(d.buf, pcm...)
			return out
		}
		d.buf = append(d.buf, pcm[:need]...)
		d.run(d.buf)
		copy(out[:need], d.buf[len(d.buf)-need:])
		d.buf = d.buf[:0]
		i = need
	}
	for ; i+d.frame <= len(pcm); i += d.frame {
		d.run(pcm[i : i+d.frame])
	}
	if i < len(pcm) {
		d.buf = append(d.buf[:0], pcm[i:]...)
	}
	return out
}

// run denoises one whole frame in place.
func (d *Denoiser) run(frame []int16) {
	c := unsafe.Slice((*int16)(unsafe.Pointer(d.cbuf)), d.frame)
	copy(c, frame)
	C.speex_preprocess_run(d.st, d.cbuf)
	copy(frame, c)
}

// ProcessFloat denoises float samples in [-1, 1] in place (converted through PCM16).
func (d *Denoiser) ProcessFloat(pcm []float32) {
	if d.st == nil || len(pcm) == 0 {
		return
	}
	if cap(d.pcm16) < len(pcm) {
		d.pcm16 = make([]int16, len(pcm))
	}
	s := d.pcm16[:len(pcm)]
	for i, v := range pcm {
		s[i] = int16(math.Max(-32768, math.Min(32767, math.Round(float64(v)*32767))))
	}
	d.Process(s)
	for i, v := range s {
		pcm[i] = float32(v) / 32767
	}
}

// Reset forgets the noise estimate and any carried samples.
func (d *Denoiser) Reset() error {
	if d.st == nil {
		return ErrClosed
	}
	C.speex_preprocess_state_destroy(d.st)
	d.st = nil
	d.buf = d.buf[:0]
	return d.init()
}

// Close frees the preprocessor; the Denoiser passes audio through unchanged afterwards.
func (d *Denoiser) Close() {
	if d.st != nil {
		C.speex_preprocess_state_destroy(d.st)
		d.st = nil
	}
	if d.cbuf != nil {
		C.free(unsafe.Pointer(d.cbuf))
		d.cbuf = nil
	}
	runtime.SetFinalizer(d, nil)
}
