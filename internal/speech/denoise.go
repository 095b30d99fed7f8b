package speech

/*
#cgo pkg-config: speexdsp
#include <speex/speex_preprocess.h>

static SpeexPreprocessState *omni_denoise_new(int frame, int rate, int suppress_db, int agc) {
	SpeexPreprocessState *st = speex_preprocess_state_init(frame, rate);
	if (st == NULL)
		return NULL;
	int on = 1, off = 0;
	speex_preprocess_ctl(st, SPEEX_PREPROCESS_SET_DENOISE, &on);
	speex_preprocess_ctl(st, SPEEX_PREPROCESS_SET_NOISE_SUPPRESS, &suppress_db);
	speex_preprocess_ctl(st, SPEEX_PREPROCESS_SET_AGC, agc ? &on : &off);
	speex_preprocess_ctl(st, SPEEX_PREPROCESS_SET_VAD, &off);
	speex_preprocess_ctl(st, SPEEX_PREPROCESS_SET_DEREVERB, &off);
	return st;
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/omniserve/omniserve/internal/audio"
)

// Noise reduction modes, OpenAI's noise_reduction.type values.
const (
	NoiseNearField = "near_field" // close-talking microphone (headset): moderate suppression
	NoiseFarField  = "far_field"  // laptop or room microphone: stronger suppression
)

// denoiseFrame is speexdsp's analysis frame: 20 ms at 16 kHz.
const denoiseFrame = audio.ASRSampleRate / 50

// Denoiser is speexdsp's preprocessor (spectral noise suppression with a running noise
// estimate) on 16 kHz mono audio, applied before VAD and ASR. It is not safe for concurrent
// use; one per stream. Close frees its C state.
type Denoiser struct {
	st   *C.SpeexPreprocessState
	pend []float32 // input short of a frame, held for the next call
	buf  []int16
}

// NewDenoiser builds a preprocessor for mode (NoiseNearField or NoiseFarField).
func NewDenoiser(mode string) (*Denoiser, error) {
	var suppress, agc C.int
	switch mode {
	case NoiseNearField:
		suppress = -15 // speexdsp's default
	case NoiseFarField:
		// Stronger suppression only: speexdsp's AGC raised the residual noise with the speech
		// (noise -2.8 dB instead of -10.6 dB in TestDenoiserSuppressesNoise).
		suppress = -30
	default:
		return nil, fmt.Errorf("noise reduction %q: %w", mode, ErrInvalidConfig)
	}
	st := C.omni_denoise_new(denoiseFrame, audio.ASRSampleRate, suppress, agc)
	if st == nil {
		return nil, fmt.Errorf("creating the speexdsp preprocessor: failed")
	}
	return &Denoiser{st: st, buf: make([]int16, denoiseFrame)}, nil
}

// Process denoises pcm16k and returns the output, which lags the input by up to one 20 ms
// frame (a partial frame is held until the next call; Flush returns it).
func (d *Denoiser) Process(pcm16k []float32) []float32 {
	in := append(d.pend, pcm16k...)
	n := len(in) / denoiseFrame * denoiseFrame
	out := make([]float32, n)
	for off := 0; off < n; off += denoiseFrame {
		d.buf = audio.Float32ToInt16(d.buf[:0], in[off:off+denoiseFrame])
		C.speex_preprocess_run(d.st, (*C.spx_int16_t)(unsafe.Pointer(&d.buf[0])))
		for i, v := range d.buf {
			out[off+i] = float32(v) / 32768
		}
	}
	d.pend = append(d.pend[:0], in[n:]...)
	return out
}

// Flush returns the held partial frame as it came (too short to denoise).
func (d *Denoiser) Flush() []float32 {
	out := append([]float32(nil), d.pend...)
	d.pend = d.pend[:0]
	return out
}

// Close frees the preprocessor. It is idempotent.
func (d *Denoiser) Close() {
	if d.st != nil {
		C.speex_preprocess_state_destroy(d.st)
		d.st = nil
	}
}
