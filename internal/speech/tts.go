package speech

/*
#cgo CFLAGS: -I/usr/include/flite
#cgo LDFLAGS: -lflite_cmu_us_slt -lflite_cmu_us_kal16 -lflite_usenglish -lflite_cmulex -lflite -lm
#include <stdlib.h>
#include <flite.h>

cst_voice *register_cmu_us_slt(const char *voxdir);
void unregister_cmu_us_slt(cst_voice *v);
cst_voice *register_cmu_us_kal16(const char *voxdir);
void unregister_cmu_us_kal16(cst_voice *v);

static cst_voice *omni_flite_voice(int which) {
	flite_init();
	return which == 0 ? register_cmu_us_slt(NULL) : register_cmu_us_kal16(NULL);
}
static void omni_flite_unvoice(int which, cst_voice *v) {
	if (which == 0) unregister_cmu_us_slt(v); else unregister_cmu_us_kal16(v);
}
*/
import "C"

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unsafe"

	"github.com/omniserve/omniserve/internal/audio"
)

// fliteLock serializes every flite call in the process. flite keeps process-wide state (the
// lexicon and language registrations its voices share) and does not document thread safety,
// so synthesis runs one at a time; a channel lock lets waiters give up on ctx.
var fliteLock = make(chan struct{}, 1)

// TTSConfig selects the flite voice and the output rate.
type TTSConfig struct {
	Voice      string // "cmu_us_slt" (default) or "cmu_us_kal16"; both are 16 kHz voices
	OutputRate int    // 8000, 16000, 24000 (default) or 48000
}

// TTS synthesizes speech with flite and resamples it to OutputRate.
type TTS struct {
	cfg   TTSConfig
	which C.int
	voice *C.cst_voice
}

// NewTTS registers the voice.
func NewTTS(cfg TTSConfig) (*TTS, error) {
	if cfg.Voice == "" {
		cfg.Voice = "cmu_us_slt"
	}
	if cfg.OutputRate == 0 {
		cfg.OutputRate = 24000
	}
	if cfg.OutputRate < audio.MinRate || cfg.OutputRate > audio.MaxRate {
		return nil, fmt.Errorf("tts output rate %d: %w", cfg.OutputRate, audio.ErrUnsupportedRate)
	}
	t := &TTS{cfg: cfg}
	switch cfg.Voice {
	case "cmu_us_slt":
		t.which = 0
	case "cmu_us_kal16":
		t.which = 1
	default:
		return nil, fmt.Errorf("tts voice %q: %w", cfg.Voice, ErrInvalidConfig)
	}
	fliteLock <- struct{}{}
	t.voice = C.omni_flite_voice(t.which)
	<-fliteLock
	if t.voice == nil {
		return nil, fmt.Errorf("registering flite voice %q: failed", cfg.Voice)
	}
	return t, nil
}

// OutputRate is the sample rate of Synthesize's output.
func (t *TTS) OutputRate() int { return t.cfg.OutputRate }

// Synthesize speaks text and returns mono samples at OutputRate. Text with no letters or digits
// gives audio.ErrEmptyText. It waits for other syntheses in the process (flite is serialized)
// or ctx.
func (t *TTS) Synthesize(ctx context.Context, text string) ([]float32, error) {
	if !strings.ContainsFunc(text, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) {
		return nil, fmt.Errorf("synthesizing %q: %w", text, audio.ErrEmptyText)
	}
	// C strings end at NUL; a NUL inside the text would silently cut it.
	ctext := C.CString(strings.ReplaceAll(text, "\x00", " "))
	defer C.free(unsafe.Pointer(ctext))
	select {
	case fliteLock <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for flite: %w", ctx.Err())
	}
	if t.voice == nil {
		<-fliteLock
		return nil, fmt.Errorf("synthesizing: %w", ErrClosed)
	}
	w := C.flite_text_to_wave(ctext, t.voice)
	var pcm []float32
	rate := 0
	failed := w == nil
	if w != nil {
		if n := int(w.num_samples); n > 0 && w.samples != nil {
			pcm = audio.Int16ToFloat32(nil, unsafe.Slice((*int16)(unsafe.Pointer(w.samples)), n))
		}
		rate = int(w.sample_rate)
		C.delete_wave(w)
	}
	<-fliteLock
	switch {
	case failed:
		return nil, fmt.Errorf("synthesizing %q: flite returned no wave: %w", text, ErrSynthesis)
	case len(pcm) == 0 && asciiSpeakable(text):
		// flite voices every ASCII letter and digit: silence here is a failure, and the
		// phrase's audio must not vanish as if there were nothing to say.
		return nil, fmt.Errorf("synthesizing %q: no audio: %w", text, ErrSynthesis)
	case len(pcm) == 0:
		// Letters outside flite's English lexicon (non-ASCII) are unspeakable for it.
		return nil, fmt.Errorf("synthesizing %q: no audio: %w", text, audio.ErrEmptyText)
	}
	if rate == t.cfg.OutputRate {
		return pcm, nil
	}
	out, err := audio.Resample(pcm, rate, t.cfg.OutputRate)
	if err != nil {
		return nil, fmt.Errorf("resampling flite output: %w", err)
	}
	return out, nil
}

// asciiSpeakable reports whether text has an ASCII letter or digit, which flite always voices.
func asciiSpeakable(text string) bool {
	return strings.ContainsFunc(text, func(r rune) bool {
		return r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r))
	})
}

// Close unregisters the voice; Synthesize then fails with ErrClosed. It is idempotent.
func (t *TTS) Close() {
	fliteLock <- struct{}{}
	defer func() { <-fliteLock }()
	if t.voice != nil {
		C.omni_flite_unvoice(t.which, t.voice)
		t.voice = nil
	}
}
