package stage

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/speech"
)

// TestStreamVADTakesSessionSettings: the stream VAD runs on the session's turn_detection
// (threshold, prefix padding, silence), and only what the session leaves unset comes from
// pipeline.thinker.vad, so the session VAD and the stream VAD never disagree.
func TestStreamVADTakesSessionSettings(t *testing.T) {
	t.Parallel()
	p := &Pipeline{cfg: PipelineConfig{Thinker: ThinkerConfig{VAD: speech.VADConfig{
		Mode: 2, Threshold: 0.5, PrefixPaddingMs: 300, SilenceDurationMs: 500, MinSpeechMs: 150}}}}
	for _, tc := range []struct {
		name string
		in   speech.VADConfig
		want speech.VADConfig
	}{
		{"session settings win", speech.VADConfig{Threshold: 0.9, PrefixPaddingMs: 100, SilenceDurationMs: 800},
			speech.VADConfig{SampleRate: 16000, Threshold: 0.9, PrefixPaddingMs: 100, SilenceDurationMs: 800, MinSpeechMs: 150}},
		{"unset: the pipeline's", speech.VADConfig{},
			speech.VADConfig{SampleRate: 16000, Mode: 2, Threshold: 0.5, PrefixPaddingMs: 300, SilenceDurationMs: 500, MinSpeechMs: 150}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, p.vadConfig(tc.in))
		})
	}
}
