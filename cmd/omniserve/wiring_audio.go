package main

import (
	"github.com/omniserve/omniserve/internal/api"
	"github.com/omniserve/omniserve/internal/stage"
)

// buildAudio mounts /v1/audio/transcriptions and /v1/audio/speech on the pipeline's ASR and
// TTS (local or remote, as the pipeline config selects).
func (c *components) buildAudio(p *stage.Pipeline) {
	cfg := api.AudioConfig{MaxBodyBytes: c.cfg.Server.MaxBodyBytes}
	if p.SupportsDuplex() {
		c.transcribe = api.NewTranscriptionsHandler(cfg, p, c.log)
	}
	if p.HasSpeech() {
		c.speech = api.NewSpeechHandler(cfg, p, c.log)
	}
}
