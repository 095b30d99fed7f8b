package session

import (
	"fmt"
	"strings"
	"time"

	"github.com/omniserve/omniserve/internal/speech"
)

// AudioFormat is a wire audio encoding and its sample rate.
type AudioFormat struct {
	Type string // pcm16 | pcm_f32le | g711_ulaw | g711_alaw
	Rate int    // Hz; g711 is always 8000
}

// TurnDetection is the server_vad configuration; a nil *TurnDetection is turn_detection: null.
type TurnDetection struct {
	Type              string  `json:"type"`
	Threshold         float64 `json:"threshold"`
	PrefixPaddingMs   int     `json:"prefix_padding_ms"`
	SilenceDurationMs int     `json:"silence_duration_ms"`
}

// Overlap policies (reference §1.3): what input during an active response does.
const (
	PolicyBargeIn    = "barge_in_on_speech"
	PolicyListenOnly = "listen_only"
)

// Config is the effective configuration of one session.
type Config struct {
	Model           string
	Modalities      []string
	Instructions    string
	Voice           string
	InputFormat     AudioFormat
	OutputFormat    AudioFormat
	TurnDetection   *TurnDetection
	IdleTimeout     time.Duration
	AutoResponse    bool
	MaxOutputTokens int // 0 = unlimited (engine default)
	Temperature     *float64
}

// WantAudio reports whether audio is an output modality.
func (c Config) WantAudio() bool {
	for _, m := range c.Modalities {
		if m == "audio" {
			return true
		}
	}
	return false
}

// OverlapPolicy is forced by turn_detection: server_vad barges in on speech, null only listens.
func (c Config) OverlapPolicy() string {
	if c.TurnDetection != nil {
		return PolicyBargeIn
	}
	return PolicyListenOnly
}

// DefaultTurnDetection returns the OpenAI server_vad defaults.
func DefaultTurnDetection() *TurnDetection {
	return &TurnDetection{Type: "server_vad", Threshold: 0.5, PrefixPaddingMs: 300, SilenceDurationMs: 500}
}

// ConfigPatch is a session.update payload: nil fields are left unchanged.
type ConfigPatch struct {
	Model            *string
	Modalities       []string
	Instructions     *string
	Voice            *string
	InputFormat      *AudioFormat
	OutputFormat     *AudioFormat
	TurnDetectionSet bool           // the key was present
	TurnDetection    *TurnDetection // nil with TurnDetectionSet = null
	IdleTimeoutS     *float64
	AutoResponse     *bool
	MaxOutputTokens  *int // 0 = unlimited
	Temperature      *float64
}

// FieldError is a validation failure with the OpenAI error code and the offending parameter.
type FieldError struct {
	Code, Param, Message string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s (%s)", e.Code, e.Message, e.Param) }

// Apply returns cfg with p applied, or a *FieldError.
func (p ConfigPatch) Apply(cfg Config) (Config, error) {
	if p.Model != nil {
		if cfg.Model != "" && *p.Model != cfg.Model {
			return cfg, &FieldError{"model_update_unsupported", "session.model", "the model cannot change within a session"}
		}
		cfg.Model = *p.Model
	}
	if p.Modalities != nil {
		seen := map[string]bool{}
		for _, m := range p.Modalities {
			if m != "text" && m != "audio" {
				return cfg, &FieldError{"invalid_value", "session.modalities", fmt.Sprintf("unsupported modality %q", m)}
			}
			seen[m] = true
		}
		if len(seen) == 0 {
			return cfg, &FieldError{"invalid_value", "session.modalities", "at least one modality is required"}
		}
		cfg.Modalities = append([]string(nil), p.Modalities...)
	}
	if p.Instructions != nil {
		cfg.Instructions = *p.Instructions
	}
	if p.Voice != nil {
		cfg.Voice = *p.Voice
	}
	if p.InputFormat != nil {
		f, err := NormalizeInputFormat(*p.InputFormat)
		if err != nil {
			return cfg, &FieldError{"unsupported_audio_format", "session.input_audio_format", err.Error()}
		}
		cfg.InputFormat = f
	}
	if p.OutputFormat != nil {
		f, err := NormalizeOutputFormat(*p.OutputFormat)
		if err != nil {
			return cfg, &FieldError{"unsupported_audio_format", "session.output_audio_format", err.Error()}
		}
		cfg.OutputFormat = f
	}
	if p.TurnDetectionSet {
		if p.TurnDetection == nil {
			cfg.TurnDetection = nil
		} else {
			td := *p.TurnDetection
			if td.Type != "server_vad" {
				return cfg, &FieldError{"unsupported_turn_detection", "turn_detection", fmt.Sprintf("turn_detection type %q is not supported (use server_vad or null)", td.Type)}
			}
			def := DefaultTurnDetection()
			if td.Threshold == 0 {
				td.Threshold = def.Threshold
			}
			if td.Threshold < 0 || td.Threshold > 1 {
				return cfg, &FieldError{"invalid_value", "turn_detection.threshold", "threshold must be in [0, 1]"}
			}
			if td.PrefixPaddingMs <= 0 {
				td.PrefixPaddingMs = def.PrefixPaddingMs
			}
			if td.SilenceDurationMs <= 0 {
				td.SilenceDurationMs = def.SilenceDurationMs
			}
			cfg.TurnDetection = &td
		}
	}
	if p.IdleTimeoutS != nil {
		if *p.IdleTimeoutS <= 0 {
			return cfg, &FieldError{"invalid_value", "session.idle_timeout_s", "idle_timeout_s must be positive"}
		}
		cfg.IdleTimeout = time.Duration(*p.IdleTimeoutS * float64(time.Second))
	}
	if p.AutoResponse != nil {
		cfg.AutoResponse = *p.AutoResponse
	}
	if p.MaxOutputTokens != nil {
		if *p.MaxOutputTokens < 0 {
			return cfg, &FieldError{"invalid_value", "session.max_response_output_tokens", "must be a positive integer or \"inf\""}
		}
		cfg.MaxOutputTokens = *p.MaxOutputTokens
	}
	if p.Temperature != nil {
		cfg.Temperature = p.Temperature
	}
	return cfg, nil
}

// NormalizeInputFormat maps aliases (reference §1.4) to canonical names and checks the rate.
func NormalizeInputFormat(f AudioFormat) (AudioFormat, error) {
	t := strings.ToLower(strings.TrimSpace(f.Type))
	switch t {
	case "pcm16", "pcm_s16le", "s16le", "audio/pcm", "pcm", "audio/pcm16":
		t = "pcm16"
	case "pcm_f32le", "f32le", "audio/pcm_f32le":
		t = "pcm_f32le"
	case "g711_ulaw", "ulaw", "mulaw", "audio/pcmu", "audio/g711_ulaw":
		t = "g711_ulaw"
	case "g711_alaw", "alaw", "audio/pcma", "audio/g711_alaw":
		t = "g711_alaw"
	default:
		return f, fmt.Errorf("unsupported audio format %q", f.Type)
	}
	rate := f.Rate
	if strings.HasPrefix(t, "g711") {
		if rate != 0 && rate != 8000 {
			return f, fmt.Errorf("%s is 8000 Hz, got %d", t, rate)
		}
		rate = 8000
	}
	if rate == 0 {
		rate = 16000
	}
	if rate < speech.MinRate || rate > speech.MaxRate {
		return f, fmt.Errorf("unsupported sample rate %d (use %d to %d Hz)", rate, speech.MinRate, speech.MaxRate)
	}
	return AudioFormat{Type: t, Rate: rate}, nil
}

// NormalizeOutputFormat accepts pcm16 (24 kHz) and G.711; the talker produces 24 kHz.
func NormalizeOutputFormat(f AudioFormat) (AudioFormat, error) {
	t := strings.ToLower(strings.TrimSpace(f.Type))
	switch t {
	case "pcm16", "pcm_s16le", "s16le", "audio/pcm", "pcm", "audio/pcm16":
		if f.Rate != 0 && f.Rate != 24000 {
			return f, fmt.Errorf("pcm16 output is 24000 Hz, got %d", f.Rate)
		}
		return AudioFormat{Type: "pcm16", Rate: 24000}, nil
	case "g711_ulaw", "ulaw", "mulaw", "audio/pcmu":
		return AudioFormat{Type: "g711_ulaw", Rate: 8000}, nil
	case "g711_alaw", "alaw", "audio/pcma":
		return AudioFormat{Type: "g711_alaw", Rate: 8000}, nil
	}
	return f, fmt.Errorf("unsupported output audio format %q", f.Type)
}
