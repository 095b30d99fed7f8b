package session

import (
	"go.uber.org/zap"
)

// The input's noise reduction (audio.input.noise_reduction): a speex preprocessor over the
// decoded 16 kHz input (inputAudio.take), before the session VAD, the engine's VAD and the
// ASR, so all of them hear the same cleaned audio. It delays the input by one 20 ms frame.

// applyNoiseReduction makes the denoiser match the configuration.
func (s *Session) applyNoiseReduction() {
	if err := s.setNoiseReduction(s.cfg.NoiseReduction); err != nil {
		// The configuration was validated: only a broken speex library gets here.
		s.log.Error("noise reduction unavailable", zap.Error(err))
	}
}
