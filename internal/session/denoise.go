package session

import (
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/speech"
)

// The input's noise reduction (audio.input.noise_reduction): a speex preprocessor over the
// decoded 16 kHz input, before the session VAD, the engine's VAD and the ASR, so all of them
// hear the same cleaned audio. It delays the input by one 20 ms frame.

// applyNoiseReduction makes the denoiser match the configuration: created when noise reduction
// is turned on, replaced when its type changes, closed when it is turned off.
func (s *Session) applyNoiseReduction() {
	kind := s.cfg.NoiseReduction
	if s.denoise != nil && s.denoise.Kind() == kind {
		return
	}
	s.closeDenoise()
	if kind == "" {
		return
	}
	d, err := speech.NewDenoiser(kind, EngineRate)
	if err != nil {
		// The configuration was validated: only a broken speex library gets here.
		s.log.Error("noise reduction unavailable", zap.String("type", kind), zap.Error(err))
		return
	}
	s.denoise = d
}

// denoiseInput cleans one decoded append in place.
func (s *Session) denoiseInput(pcm []float32) {
	if s.denoise != nil {
		s.denoise.ProcessFloat(pcm)
	}
}

func (s *Session) closeDenoise() {
	if s.denoise != nil {
		s.denoise.Close()
		s.denoise = nil
	}
}
