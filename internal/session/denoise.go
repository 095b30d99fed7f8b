package session

import (
	"fmt"

	"github.com/omniserve/omniserve/internal/speech"
)

// denoiseInput applies audio.input.noise_reduction to decoded input (16 kHz) before the VAD
// and the ASR see it, as OpenAI's noise reduction does. The preprocessor keeps a running noise
// estimate, so it lives as long as its mode; a change of mode starts a fresh one. The output
// lags by under one 20 ms frame: the tail of an append waits for the next one.
func (s *Session) denoiseInput(pcm []float32) ([]float32, error) {
	mode := s.cfg.NoiseReduction
	if mode != s.denoiseMode {
		s.closeDenoiser()
	}
	if mode == "" {
		return pcm, nil
	}
	if s.denoiser == nil {
		d, err := speech.NewDenoiser(mode)
		if err != nil {
			return nil, fmt.Errorf("noise reduction: %w", err)
		}
		s.denoiser, s.denoiseMode = d, mode
	}
	return s.denoiser.Process(pcm), nil
}

// closeDenoiser frees the preprocessor (C memory the GC does not see); Run defers it.
func (s *Session) closeDenoiser() {
	if s.denoiser != nil {
		s.denoiser.Close()
		s.denoiser = nil
	}
	s.denoiseMode = ""
}

// noiseReductionWire is the session's noise_reduction object (null when off).
func (s *Session) noiseReductionWire() any {
	if s.cfg.NoiseReduction == "" {
		return nil
	}
	return map[string]any{"type": s.cfg.NoiseReduction}
}
