package stage

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParsePipelineConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		yaml    string
		wantErr string // substring; "" = no error
		check   func(t *testing.T, c PipelineConfig)
	}{
		{
			name: "no pipeline section gives defaults",
			yaml: "server:\n  port: 1\n",
			check: func(t *testing.T, c PipelineConfig) {
				require.Equal(t, DefaultPipelineConfig(), c)
				require.Len(t, c.Stages, 2)
				require.Equal(t, stageThinker, c.Stages[0].Name)
				require.Equal(t, 0.5, c.Thinker.VAD.Threshold)
				require.Equal(t, 300, c.Thinker.VAD.PrefixPaddingMs)
				require.Equal(t, 500, c.Thinker.VAD.SilenceDurationMs)
				require.Equal(t, 24000, c.Talker.OutputRate)
				require.Equal(t, "cmu_us_slt", c.Talker.Voice)
			},
		},
		{
			name: "values override defaults, other sections ignored",
			yaml: `
server: {whatever: 1}
pipeline:
  stages:
    - {name: thinker, workers: 3, queue_size: 5}
    - {name: talker, workers: 2}
  connectors:
    - {from: thinker, to: talker, capacity: 7}
  thinker:
    max_tokens: 99
    vad: {silence_duration_ms: 800}
  talker:
    phrase: {first_max_words: 2}
`,
			check: func(t *testing.T, c PipelineConfig) {
				require.Equal(t, 3, c.Stages[0].Workers)
				require.Equal(t, 5, c.Stages[0].QueueSize)
				require.Equal(t, 2, c.Stages[1].Workers)
				require.Equal(t, 64, c.Stages[1].QueueSize)
				require.Equal(t, 7, c.Connectors[0].Capacity)
				require.Equal(t, 99, c.Thinker.MaxTokens)
				require.Equal(t, 800, c.Thinker.VAD.SilenceDurationMs)
				require.Equal(t, 300, c.Thinker.VAD.PrefixPaddingMs)
				require.Equal(t, 2, c.Talker.Phrase.FirstMaxWords)
				require.Equal(t, 12, c.Talker.Phrase.MaxWords)
			},
		},
		{
			name: "thinker only graph",
			yaml: "pipeline:\n  stages: [{name: thinker}]\n",
			check: func(t *testing.T, c PipelineConfig) {
				require.Len(t, c.Stages, 1)
				require.Empty(t, c.Connectors)
			},
		},
		{name: "unknown key names it", yaml: "pipeline:\n  thinker:\n    max_tokenz: 3\n", wantErr: "max_tokenz"},
		{name: "unknown nested key names it", yaml: "pipeline:\n  talker:\n    phrase: {bogus: 1}\n", wantErr: "bogus"},
		{name: "wrong stage order", yaml: "pipeline:\n  stages: [{name: talker}, {name: thinker}]\n", wantErr: "stages[0].name"},
		{name: "negative workers", yaml: "pipeline:\n  stages: [{name: thinker, workers: -1}]\n", wantErr: "stages[0].workers"},
		{name: "bad rate", yaml: "pipeline:\n  talker: {output_rate: 44100}\n", wantErr: "talker.output_rate"},
		{name: "bad threshold", yaml: "pipeline:\n  thinker: {vad: {threshold: 2}}\n", wantErr: "thinker.vad.threshold"},
		{name: "connector mismatch", yaml: "pipeline:\n  connectors: [{from: talker, to: thinker}]\n", wantErr: "connectors[0]"},
		{name: "bad yaml", yaml: "pipeline: [", wantErr: "invalid pipeline config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := ParsePipelineConfig([]byte(tt.yaml))
			if tt.wantErr != "" {
				require.ErrorIs(t, err, errConfig)
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			tt.check(t, c)
		})
	}
}

// The shipped configs must parse, and spell out the defaults they claim.
func TestShippedConfigs(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"omni-cpu.yaml", "omni-cuda.yaml"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join("..", "..", "configs", name)
			require.FileExists(t, path, "the repository ships it")
			c, err := loadPipelineConfig(path)
			require.NoError(t, err)
			require.NoError(t, c.validate())
			require.Len(t, c.Stages, 2)
		})
	}
}

func TestLoadPipelineConfigMissingFile(t *testing.T) {
	t.Parallel()
	_, err := loadPipelineConfig(filepath.Join(t.TempDir(), "nope.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestPipelineConfigNeedsLocal(t *testing.T) {
	t.Parallel()
	r := &RemoteConfig{BaseURL: "http://h/v1", Model: "m"}
	textOnly := DefaultPipelineConfig()
	textOnly.Stages = textOnly.Stages[:1]
	tests := []struct {
		name             string
		cfg              PipelineConfig
		engine, asr, tts bool
	}{
		{"all local", DefaultPipelineConfig(), true, true, true},
		{"remote thinker", func() PipelineConfig { c := DefaultPipelineConfig(); c.Remote.Thinker = r; return c }(), false, true, true},
		{"remote asr and tts", func() PipelineConfig {
			c := DefaultPipelineConfig()
			c.Remote.ASR, c.Remote.TTS = r, r
			return c
		}(), true, false, false},
		{"no talker stage", textOnly, true, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.engine, tt.cfg.NeedsLocalEngine())
			require.Equal(t, tt.asr, tt.cfg.NeedsLocalASR())
			require.Equal(t, tt.tts, tt.cfg.NeedsLocalTTS())
		})
	}
}
