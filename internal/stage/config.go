package stage

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/omniserve/omniserve/internal/speech"
)

// PipelineConfig is the `pipeline:` section of configs/*.yaml: the stage graph and the settings
// of the two stages of the cascaded default (thinker, talker). Zero values mean "the default"
// written in each field's comment; loadPipelineConfig and DefaultPipelineConfig fill them in.
type PipelineConfig struct {
	// Stages in stage-id order. Default: thinker (stage 0) and talker (stage 1).
	Stages []StageConfig `yaml:"stages"`
	// Connectors between stages. Default: one thinker → talker connector.
	Connectors []ConnectorConfig `yaml:"connectors"`
	// SinkQueue bounds the events waiting for one request's Sink (default 256). A full queue makes
	// the producing stage wait, so a slow consumer slows its own request only.
	SinkQueue int `yaml:"sink_queue"`
	// StreamQueue bounds the sequence jobs (commits, responses) queued on one duplex stream (default 16).
	StreamQueue int           `yaml:"stream_queue"`
	Thinker     ThinkerConfig `yaml:"thinker"`
	Talker      TalkerConfig  `yaml:"talker"`
	// Remote runs the thinker's LLM, the ASR or the TTS on OpenAI-compatible servers
	// (see RemoteStages); absent entries stay local.
	Remote RemoteStages `yaml:"remote"`
}

// NeedsLocalEngine reports whether a stage runs the in-process LLM engine: false when the
// thinker's LLM is remote (pipeline.remote.thinker), and then Deps.Engine may be nil and the
// server loads no model (its --model is only the id it serves).
func (c PipelineConfig) NeedsLocalEngine() bool { return c.Remote.Thinker == nil }

// NeedsLocalASR reports whether the in-process ASR (pocketsphinx) is used: false when
// pipeline.remote.asr is set, and then Deps.ASR may be nil.
func (c PipelineConfig) NeedsLocalASR() bool { return c.Remote.ASR == nil }

// NeedsLocalTTS reports whether the in-process TTS (flite) is used: only with a talker stage
// and no pipeline.remote.tts; otherwise Deps.TTS may be nil.
func (c PipelineConfig) NeedsLocalTTS() bool { return len(c.Stages) > 1 && c.Remote.TTS == nil }

// StageConfig is one node of the graph.
type StageConfig struct {
	// Name is "thinker" or "talker".
	Name string `yaml:"name"`
	// Workers is how many requests the stage works on at once (default: thinker 16, talker 4).
	// The thinker's requests share one engine scheduler that batches them, so more workers means
	// bigger batches; the talker's TTS is CPU-bound per request.
	Workers int `yaml:"workers"`
	// QueueSize is how many requests may wait for a worker (default 64); one more gets ErrQueueFull.
	QueueSize int `yaml:"queue_size"`
}

// ConnectorConfig is one edge of the graph: a bounded in-process queue per request.
type ConnectorConfig struct {
	From string `yaml:"from"` // stage name
	To   string `yaml:"to"`   // stage name
	// Capacity is the number of items buffered per request on this edge (default 64). A full
	// connector makes the sender wait: back-pressure instead of unbounded memory.
	Capacity int `yaml:"capacity"`
}

// ThinkerConfig holds stage-0 settings.
type ThinkerConfig struct {
	// MaxTokens is the default generation limit of a response or chat request (default 256).
	MaxTokens int `yaml:"max_tokens"`
	// Instructions is the default system prompt of a duplex stream when DuplexOptions has none.
	Instructions string `yaml:"instructions"`
	// VAD holds the default turn-detection settings of duplex streams: the Realtime API's
	// server_vad settings (mode, threshold, prefix_padding_ms, silence_duration_ms,
	// min_speech_ms; speech's defaults: 2, 0.5, 300, 500, 150).
	VAD speech.VADConfig `yaml:"vad"`
	// Sampling holds the default sampling settings.
	Sampling SamplingConfig `yaml:"sampling"`
	// AudioHistoryMs bounds the audio kept from before a speech start, so that the ASR also hears
	// the prefix padding (default 1000; must be at least vad.prefix_padding_ms).
	AudioHistoryMs int `yaml:"audio_history_ms"`
	// PreemptiveMs starts a server-VAD turn's response speculatively after this much silence,
	// before vad.silence_duration_ms confirms the endpoint; its outputs are held until then and
	// dropped if the user resumes or the final transcript differs (default 0: off; must be less
	// than vad.silence_duration_ms to take effect).
	PreemptiveMs int `yaml:"preemptive_ms"`
	// EndOfTurn is where semantic_vad's end-of-turn probability comes from: "thinker" (the
	// model's probability of closing the user's message after the partial transcript), "off"
	// (silence alone), or "auto" (default): the thinker, except on the dummy models, whose
	// probability means nothing, so their sessions keep the silence windows.
	EndOfTurn string `yaml:"end_of_turn"`
}

// End-of-turn estimate sources (ThinkerConfig.EndOfTurn).
const (
	endOfTurnAuto    = "auto"
	endOfTurnThinker = "thinker"
	endOfTurnOff     = "off"
)

// SamplingConfig holds default sampling settings (zero = the engine's default).
type SamplingConfig struct {
	Temperature   float32 `yaml:"temperature"`
	TopP          float32 `yaml:"top_p"`
	TopK          int     `yaml:"top_k"`
	Seed          *uint32 `yaml:"seed"` // nil: a fresh random seed per response
	RepeatPenalty float32 `yaml:"repeat_penalty"`
}

// TalkerConfig holds stage-1 settings.
type TalkerConfig struct {
	Voice      string       `yaml:"voice"`       // flite voice (default cmu_us_slt)
	OutputRate int          `yaml:"output_rate"` // Hz of Audio outputs (default 24000)
	Phrase     PhraseConfig `yaml:"phrase"`
}

// PhraseConfig are the rules that cut streamed text into phrases for TTS. A short first phrase
// gets the first audio out early; later phrases are longer so the voice sounds natural.
type PhraseConfig struct {
	// Punctuation ends a phrase when it ends a word (default ".,!?;:").
	Punctuation string `yaml:"punctuation"`
	// FirstMaxWords ends the first phrase of a reply after this many words (default 4).
	FirstMaxWords int `yaml:"first_max_words"`
	// MaxWords ends later phrases after this many words (default 12).
	MaxWords int `yaml:"max_words"`
	// MinWords: punctuation does not end a phrase shorter than this (default 1).
	MinWords int `yaml:"min_words"`
}

// Stage names of the cascaded default.
const (
	stageThinker = "thinker"
	stageTalker  = "talker"
)

// errConfig reports an invalid pipeline configuration; the message names the key.
var errConfig = errors.New("stage: invalid pipeline config")

// DefaultPipelineConfig returns the built-in graph and settings (the ones configs/omni-cpu.yaml
// spells out).
func DefaultPipelineConfig() PipelineConfig {
	var c PipelineConfig
	c.applyDefaults()
	return c
}

// loadPipelineConfig reads the `pipeline:` section of a YAML file. Other top-level keys belong to
// other packages and are ignored; an unknown key inside `pipeline:` is an error that names it.
// A file without a `pipeline:` section yields the defaults.
func loadPipelineConfig(path string) (PipelineConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return PipelineConfig{}, fmt.Errorf("reading pipeline config: %w", err)
	}
	c, err := ParsePipelineConfig(data)
	if err != nil {
		return PipelineConfig{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParsePipelineConfig is loadPipelineConfig on a file's bytes.
func ParsePipelineConfig(data []byte) (PipelineConfig, error) {
	var top struct {
		Pipeline yaml.Node `yaml:"pipeline"`
	}
	if err := yaml.Unmarshal(data, &top); err != nil {
		return PipelineConfig{}, fmt.Errorf("%w: %w", errConfig, err)
	}
	return pipelineConfigFromNode(&top.Pipeline)
}

// pipelineConfigFromNode decodes an already parsed `pipeline:` node (internal/config keeps it
// undecoded). A nil or empty node yields the defaults.
func pipelineConfigFromNode(n *yaml.Node) (PipelineConfig, error) {
	var c PipelineConfig
	if n != nil && n.Kind != 0 {
		// yaml.Node.Decode has no strict mode: re-encode and decode with KnownFields so that a
		// misspelt key fails loudly instead of silently taking the default.
		raw, err := yaml.Marshal(n)
		if err != nil {
			return PipelineConfig{}, fmt.Errorf("%w: %w", errConfig, err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil {
			return PipelineConfig{}, fmt.Errorf("%w: pipeline: %s", errConfig, strings.TrimPrefix(err.Error(), "yaml: "))
		}
	}
	c.applyDefaults()
	if err := c.validate(); err != nil {
		return PipelineConfig{}, err
	}
	return c, nil
}

func (c *PipelineConfig) applyDefaults() {
	c.applyGraphDefaults()
	setDefault(&c.SinkQueue, 256)
	setDefault(&c.StreamQueue, 16)
	c.applyStageDefaults()
	for _, r := range []*RemoteConfig{c.Remote.Thinker, c.Remote.ASR, c.Remote.TTS} {
		if r != nil {
			r.applyDefaults()
		}
	}
}

// applyGraphDefaults fills in the default graph and each stage's and connector's sizes.
func (c *PipelineConfig) applyGraphDefaults() {
	if len(c.Stages) == 0 {
		c.Stages = []StageConfig{{Name: stageThinker}, {Name: stageTalker}}
	}
	for i := range c.Stages {
		s := &c.Stages[i]
		if s.Workers == 0 {
			s.Workers = 16
			if s.Name == stageTalker {
				s.Workers = 4
			}
		}
		if s.QueueSize == 0 {
			s.QueueSize = 64
		}
	}
	if len(c.Connectors) == 0 && len(c.Stages) == 2 {
		c.Connectors = []ConnectorConfig{{From: c.Stages[0].Name, To: c.Stages[1].Name}}
	}
	for i := range c.Connectors {
		if c.Connectors[i].Capacity == 0 {
			c.Connectors[i].Capacity = 64
		}
	}
}

// applyStageDefaults fills in the thinker's and the talker's settings.
func (c *PipelineConfig) applyStageDefaults() {
	t := &c.Thinker
	setDefault(&t.MaxTokens, 256)
	setDefault(&t.AudioHistoryMs, 1000)
	if t.EndOfTurn == "" {
		t.EndOfTurn = endOfTurnAuto
	}
	setDefault(&t.VAD.Mode, speech.DefaultMode)
	if t.VAD.Threshold == 0 {
		t.VAD.Threshold = speech.DefaultThreshold
	}
	setDefault(&t.VAD.PrefixPaddingMs, speech.DefaultPrefixPaddingMs)
	setDefault(&t.VAD.SilenceDurationMs, speech.DefaultSilenceDurationMs)
	setDefault(&t.VAD.MinSpeechMs, speech.DefaultMinSpeechMs)
	k := &c.Talker
	if k.Voice == "" {
		k.Voice = "cmu_us_slt"
	}
	setDefault(&k.OutputRate, 24000)
	if k.Phrase.Punctuation == "" {
		k.Phrase.Punctuation = ".,!?;:"
	}
	setDefault(&k.Phrase.FirstMaxWords, 4)
	setDefault(&k.Phrase.MaxWords, 12)
	setDefault(&k.Phrase.MinWords, 1)
}

func setDefault(v *int, d int) {
	if *v == 0 {
		*v = d
	}
}

// validate checks ranges and the graph shape. The cascaded default is the only graph this
// package runs: stage 0 thinker, optional stage 1 talker, one connector between them.
func (c PipelineConfig) validate() error {
	if err := c.validateGraph(); err != nil {
		return err
	}
	if err := c.validateSettings(); err != nil {
		return err
	}
	for key, r := range map[string]*RemoteConfig{"thinker": c.Remote.Thinker, "asr": c.Remote.ASR, "tts": c.Remote.TTS} {
		if r != nil {
			if err := r.validate(key); err != nil {
				return err
			}
		}
	}
	return nil
}

func badConfig(key string, val any, msg string) error {
	return fmt.Errorf("%w: pipeline.%s = %v: %s", errConfig, key, val, msg)
}

// validateGraph checks the stages and the connectors between them.
func (c PipelineConfig) validateGraph() error {
	if len(c.Stages) < 1 || len(c.Stages) > 2 {
		return badConfig("stages", len(c.Stages), "want 1 (thinker) or 2 (thinker, talker) stages")
	}
	want := []string{stageThinker, stageTalker}
	for i, s := range c.Stages {
		if s.Name != want[i] {
			return badConfig(fmt.Sprintf("stages[%d].name", i), s.Name, "want "+want[i])
		}
		if s.Workers < 1 {
			return badConfig(fmt.Sprintf("stages[%d].workers", i), s.Workers, "must be at least 1")
		}
		if s.QueueSize < 1 {
			return badConfig(fmt.Sprintf("stages[%d].queue_size", i), s.QueueSize, "must be at least 1")
		}
	}
	if len(c.Connectors) != len(c.Stages)-1 {
		return badConfig("connectors", len(c.Connectors), fmt.Sprintf("want %d connector(s) for %d stage(s)", len(c.Stages)-1, len(c.Stages)))
	}
	for i, cc := range c.Connectors {
		if cc.From != c.Stages[i].Name || cc.To != c.Stages[i+1].Name {
			return badConfig(fmt.Sprintf("connectors[%d]", i), cc.From+"->"+cc.To, "want "+c.Stages[i].Name+"->"+c.Stages[i+1].Name)
		}
		if cc.Capacity < 1 {
			return badConfig(fmt.Sprintf("connectors[%d].capacity", i), cc.Capacity, "must be at least 1")
		}
	}
	return nil
}

// validateSettings checks the queues' and the stages' settings.
func (c PipelineConfig) validateSettings() error {
	t, k := c.Thinker, c.Talker
	checks := []struct {
		bad bool
		key string
		val any
		msg string
	}{
		{c.SinkQueue < 1, "sink_queue", c.SinkQueue, "must be at least 1"},
		{c.StreamQueue < 1, "stream_queue", c.StreamQueue, "must be at least 1"},
		{t.MaxTokens < 1, "thinker.max_tokens", t.MaxTokens, "must be at least 1"},
		{t.EndOfTurn != endOfTurnAuto && t.EndOfTurn != endOfTurnThinker && t.EndOfTurn != endOfTurnOff,
			"thinker.end_of_turn", t.EndOfTurn, "want auto, thinker or off"},
		{t.VAD.Mode < 0 || t.VAD.Mode > 3, "thinker.vad.mode", t.VAD.Mode, "must be 0..3"},
		{t.VAD.Threshold < 0 || t.VAD.Threshold > 1, "thinker.vad.threshold", t.VAD.Threshold, "must be 0..1"},
		{t.VAD.PrefixPaddingMs < 0, "thinker.vad.prefix_padding_ms", t.VAD.PrefixPaddingMs, "must not be negative"},
		{t.VAD.SilenceDurationMs < 0, "thinker.vad.silence_duration_ms", t.VAD.SilenceDurationMs, "must not be negative"},
		{t.VAD.MinSpeechMs < 0, "thinker.vad.min_speech_ms", t.VAD.MinSpeechMs, "must not be negative"},
		{t.PreemptiveMs < 0, "thinker.preemptive_ms", t.PreemptiveMs, "must not be negative"},
		{t.AudioHistoryMs < t.VAD.PrefixPaddingMs, "thinker.audio_history_ms", t.AudioHistoryMs, "must be at least vad.prefix_padding_ms"},
		{!validRate(k.OutputRate), "talker.output_rate", k.OutputRate, "must be 8000, 16000, 24000 or 48000"},
		{k.Phrase.FirstMaxWords < 1, "talker.phrase.first_max_words", k.Phrase.FirstMaxWords, "must be at least 1"},
		{k.Phrase.MaxWords < 1, "talker.phrase.max_words", k.Phrase.MaxWords, "must be at least 1"},
		{k.Phrase.MinWords < 1, "talker.phrase.min_words", k.Phrase.MinWords, "must be at least 1"},
	}
	for _, ch := range checks {
		if ch.bad {
			return badConfig(ch.key, ch.val, ch.msg)
		}
	}
	return nil
}

func validRate(r int) bool {
	return r == 8000 || r == 16000 || r == 24000 || r == 48000
}
