package session

import (
	"fmt"
	"strings"
	"time"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/speech"
)

// AudioFormat is a wire audio encoding (pcm16 | pcm_f32le | g711_ulaw | g711_alaw, after
// NormalizeInputFormat) and its sample rate in Hz (g711 is always 8000): the protocol's own
// definition, one type from the wire to the session.
type AudioFormat = protocol.AudioFormat

// TurnDetection is the effective server_vad / semantic_vad configuration; a nil *TurnDetection
// is turn_detection: null. semantic_vad is run by the same VAD with its eagerness mapped to
// endpointing parameters (see SemanticSilenceMs).
type TurnDetection struct {
	// The type, the VAD's settings and semantic_vad's eagerness: what the engine stream's own
	// endpointing reads too, passed to it as is (duplex.Options.Turn).
	duplex.TurnDetection
	IdleTimeoutMs     int // 0 = null (no idle timeout)
	CreateResponse    bool
	InterruptResponse bool
}

// Wire returns the turn_detection object (nil: null).
func (td *TurnDetection) Wire() *protocol.TurnDetectionObject {
	if td == nil {
		return nil
	}
	return &protocol.TurnDetectionObject{Type: td.Type, Threshold: td.Threshold, PrefixPaddingMs: td.PrefixPaddingMs,
		SilenceDurationMs: td.SilenceDurationMs, IdleTimeoutMs: td.IdleTimeoutMs, CreateResponse: td.CreateResponse,
		InterruptResponse: td.InterruptResponse, Eagerness: td.Eagerness}
}

// TurnDetectionPatch is a turn_detection object as the client sent it (the protocol's
// definition): nil fields take the defaults of its type (an object replaces the previous
// setting as a whole).
type TurnDetectionPatch = protocol.TurnDetection

// SemanticSilenceMs maps semantic_vad eagerness to the silence that ends a turn when there is
// no end-of-turn estimate (semvad.go; the auto-response stream applies the same table itself,
// stage/duplex_semvad.go). With an estimate, SemanticParams rules.
func SemanticSilenceMs(eagerness string) int {
	return duplex.SemanticParams(eagerness).SilenceMs
}

// Overlap policies (vllm-omni's names): what input during an active response does.
const (
	policyBargeIn    = "barge_in_on_speech"
	policyListenOnly = "listen_only"
)

// Config is the effective configuration of one session.
type Config struct {
	Model         string
	Modalities    []string
	Instructions  string
	Voice         string
	InputFormat   AudioFormat
	OutputFormat  AudioFormat
	TurnDetection *TurnDetection
	Transcription bool // audio.input.transcription is set: transcription events are sent
	// NoiseReduction is the input's noise reduction ("" = off, speech.NoiseNearField or
	// speech.NoiseFarField), applied before the VAD and the ASR.
	NoiseReduction string
	// Tools are the functions the model may call, and ToolChoice how (tools.go).
	Tools      []duplex.Tool
	ToolChoice ToolChoice
	// MCP are the MCP servers of session.tools (mcp.go).
	MCP             []mcpTool
	IdleTimeout     time.Duration
	MaxOutputTokens int // 0 = unlimited (engine default)
	Temperature     *float64
	// Seed (extension extra_body.seed) makes sampling reproducible; nil = a fresh random seed
	// per response unless the server's configuration sets one.
	Seed *uint32
	// Tracing is session.tracing as the client set it, echoed in the session. omniserve
	// uploads no traces to OpenAI; its own traces go to the OTLP endpoint (docs/STATS.md).
	Tracing any
	// TranscriptLogprobs: include names item.input_audio_transcription.logprobs, so each
	// input_audio_transcription.completed carries its words' logprobs.
	TranscriptLogprobs bool
	// vadDefaults is the server's server_vad defaults (ManagerConfig.TurnDetection), which a
	// turn_detection object or auto_response starts from.
	vadDefaults *TurnDetection
}

// copy is a fresh copy of td.
func (td *TurnDetection) copy() *TurnDetection {
	c := *td
	return &c
}

// defaultTurnDetection is a fresh copy of the session's server_vad defaults.
func (c Config) defaultTurnDetection() *TurnDetection {
	if c.vadDefaults == nil {
		return defaultTurnDetection()
	}
	td := *c.vadDefaults
	return &td
}

// maxOutputTokensLimit is the largest max_output_tokens OpenAI accepts.
const maxOutputTokensLimit = 4096

// WantAudio reports whether audio is an output modality.
func (c Config) WantAudio() bool {
	for _, m := range c.Modalities {
		if m == "audio" {
			return true
		}
	}
	return false
}

// OverlapPolicy follows turn_detection: interrupt_response barges in on speech, otherwise (or
// with turn_detection null) input during a response is only listened to.
func (c Config) OverlapPolicy() string {
	if c.TurnDetection != nil && c.TurnDetection.InterruptResponse {
		return policyBargeIn
	}
	return policyListenOnly
}

// defaultTurnDetection returns the OpenAI server_vad defaults (speech's table); a server's
// ManagerConfig.TurnDetection may replace them.
func defaultTurnDetection() *TurnDetection {
	return &TurnDetection{TurnDetection: duplex.TurnDetection{Type: "server_vad", Threshold: speech.DefaultThreshold,
		PrefixPaddingMs: speech.DefaultPrefixPaddingMs, SilenceDurationMs: speech.DefaultSilenceDurationMs},
		CreateResponse: true, InterruptResponse: true}
}

// ConfigPatch is a session.update payload: nil fields are left unchanged.
type ConfigPatch struct {
	Model            *string
	Modalities       []string
	Instructions     *string
	Voice            *string
	InputFormat      *AudioFormat
	OutputFormat     *AudioFormat
	TurnDetectionSet bool                // the key was present
	TurnDetection    *TurnDetectionPatch // nil with TurnDetectionSet = null
	TranscriptionSet bool                // audio.input.transcription was present
	Transcription    bool                // it was an object (not null)
	// NoiseReductionSet: audio.input.noise_reduction was present; NoiseReduction is its type
	// (speech.NoiseNearField or speech.NoiseFarField), "" for null.
	NoiseReductionSet bool
	NoiseReduction    string
	Type              *string // GA session.type
	IdleTimeoutS      *float64
	AutoResponse      *bool
	MaxOutputTokens   *int // 0 = unlimited
	Temperature       *float64
	Seed              *uint32
	// ToolsSet: tools was present (empty clears them); ToolChoice is tool_choice.
	ToolsSet   bool
	Tools      []duplex.Tool
	ToolChoice *ToolChoice
	TracingSet bool
	Tracing    any // nil, "auto" or the tracing object (validated by internal/protocol)
	// MCPTools are the `type: "mcp"` entries of tools (with ToolsSet).
	MCPTools []mcpTool
	// TranscriptLogprobs is include when present: whether it names
	// item.input_audio_transcription.logprobs.
	TranscriptLogprobs *bool
}

// FieldError is a validation failure with the OpenAI error code and the offending parameter.
type FieldError struct {
	Code, Param, Message string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s (%s)", e.Code, e.Message, e.Param) }

// Apply returns cfg with p applied, or a *FieldError.
func (p ConfigPatch) Apply(cfg Config) (Config, error) {
	if p.Model != nil {
		// The session checked the name (settings.resolveModel): every name it accepts is this
		// server's one model.
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
		if v := strings.TrimSpace(*p.Voice); v == "" || len(v) > 64 {
			return cfg, &FieldError{"invalid_value", "session.audio.output.voice", "voice must be a non-empty string of at most 64 characters"}
		}
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
	if p.Type != nil && *p.Type != "realtime" && *p.Type != "transcription" {
		return cfg, &FieldError{"invalid_value", "session.type", fmt.Sprintf("Invalid value for 'session.type': %q. Supported values are: \"realtime\" and \"transcription\".", *p.Type)}
	}
	if p.TranscriptionSet {
		cfg.Transcription = p.Transcription
	}
	if p.ToolsSet || p.ToolChoice != nil {
		tools, choice := cfg.Tools, cfg.ToolChoice
		if p.ToolsSet {
			tools = p.Tools
		}
		if p.ToolChoice != nil {
			choice = *p.ToolChoice
		}
		if fe := checkTools(tools, choice, 0, "session"); fe != nil {
			return cfg, fe
		}
		cfg.Tools, cfg.ToolChoice = tools, choice
		if p.ToolsSet {
			cfg.MCP = p.MCPTools
		}
	}
	if p.TranscriptLogprobs != nil {
		cfg.TranscriptLogprobs = *p.TranscriptLogprobs
	}
	if p.NoiseReductionSet {
		switch p.NoiseReduction {
		case "", speech.NoiseNearField, speech.NoiseFarField:
			cfg.NoiseReduction = p.NoiseReduction
		default:
			return cfg, &FieldError{"invalid_value", "session.audio.input.noise_reduction.type",
				fmt.Sprintf("noise_reduction type %q is not supported (near_field or far_field)", p.NoiseReduction)}
		}
	}
	if p.TurnDetectionSet {
		if p.TurnDetection == nil {
			cfg.TurnDetection = nil
		} else {
			td, err := resolveTurnDetection(p.TurnDetection, cfg.defaultTurnDetection())
			if err != nil {
				return cfg, err
			}
			cfg.TurnDetection = td
		}
	}
	if p.TracingSet {
		cfg.Tracing = p.Tracing
	}
	if p.IdleTimeoutS != nil {
		if *p.IdleTimeoutS <= 0 {
			return cfg, &FieldError{"invalid_value", "session.idle_timeout_s", "idle_timeout_s must be positive"}
		}
		cfg.IdleTimeout = time.Duration(*p.IdleTimeoutS * float64(time.Second))
	}
	if p.AutoResponse != nil {
		// The native extension is server_vad with create_response (plus, on ?duplex=1, the
		// engine's listen / speak decisions). On a session without turn detection it keeps that
		// session's listen-only overlap: interrupt_response false.
		td := cfg.defaultTurnDetection()
		td.InterruptResponse = false
		if cfg.TurnDetection != nil {
			c := *cfg.TurnDetection
			td = &c
		}
		td.CreateResponse = *p.AutoResponse
		if *p.AutoResponse || cfg.TurnDetection != nil {
			cfg.TurnDetection = td
		}
	}
	if p.MaxOutputTokens != nil {
		if *p.MaxOutputTokens < 0 || *p.MaxOutputTokens > maxOutputTokensLimit {
			return cfg, &FieldError{"invalid_value", "session.max_output_tokens", "must be an integer in [1, 4096] or \"inf\""}
		}
		cfg.MaxOutputTokens = *p.MaxOutputTokens
	}
	if p.Seed != nil {
		cfg.Seed = p.Seed
	}
	if p.Temperature != nil {
		cfg.Temperature = p.Temperature
	}
	return cfg, nil
}

// NormalizeInputFormat maps the aliases vllm-omni accepts (audio/pcm, pcm, s16le, f32le,
// ulaw, mulaw, alaw, ...) to canonical names and checks the rate.
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
		rate = 24000 // pcm16 / audio/pcm without a rate: OpenAI's 24 kHz
	}
	if rate < audio.MinRate || rate > audio.MaxRate {
		return f, fmt.Errorf("unsupported sample rate %d (use %d to %d Hz)", rate, audio.MinRate, audio.MaxRate)
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

// resolveTurnDetection validates a turn_detection object and fills its defaults from td.
func resolveTurnDetection(p *TurnDetectionPatch, td *TurnDetection) (*TurnDetection, error) {
	if p.Type != nil {
		td.Type = *p.Type
	}
	const param = "session.audio.input.turn_detection"
	switch td.Type {
	case "server_vad":
	case "semantic_vad":
		td.Eagerness = "auto"
		if p.Eagerness != nil {
			switch *p.Eagerness {
			case "low", "medium", "high", "auto":
				td.Eagerness = *p.Eagerness
			default:
				return nil, &FieldError{"invalid_value", param + ".eagerness", fmt.Sprintf("eagerness %q is not one of low, medium, high, auto", *p.Eagerness)}
			}
		}
		td.SilenceDurationMs = SemanticSilenceMs(td.Eagerness)
	default:
		return nil, &FieldError{"invalid_value", param + ".type", fmt.Sprintf("turn_detection type %q is not supported (use server_vad, semantic_vad or null)", td.Type)}
	}
	if p.Threshold != nil {
		if *p.Threshold < 0 || *p.Threshold > 1 || *p.Threshold != *p.Threshold {
			return nil, &FieldError{"invalid_value", param + ".threshold", "threshold must be in [0, 1]"}
		}
		if *p.Threshold > 0 {
			td.Threshold = *p.Threshold
		}
	}
	if p.PrefixPaddingMs != nil {
		if *p.PrefixPaddingMs < 0 {
			return nil, &FieldError{"integer_below_min_value", param + ".prefix_padding_ms", "prefix_padding_ms must be >= 0"}
		}
		if *p.PrefixPaddingMs > 10000 {
			return nil, &FieldError{"integer_above_max_value", param + ".prefix_padding_ms", "prefix_padding_ms must be <= 10000"}
		}
		td.PrefixPaddingMs = *p.PrefixPaddingMs
	}
	if p.SilenceDurationMs != nil && td.Type == "server_vad" {
		if *p.SilenceDurationMs < 0 {
			return nil, &FieldError{"integer_below_min_value", param + ".silence_duration_ms", "silence_duration_ms must be >= 0"}
		}
		if *p.SilenceDurationMs > 10000 {
			return nil, &FieldError{"integer_above_max_value", param + ".silence_duration_ms", "silence_duration_ms must be <= 10000"}
		}
		if *p.SilenceDurationMs > 0 {
			td.SilenceDurationMs = *p.SilenceDurationMs
		}
	}
	if p.IdleTimeoutMs != nil {
		if *p.IdleTimeoutMs < 5000 || *p.IdleTimeoutMs > 30000 {
			return nil, &FieldError{"invalid_value", param + ".idle_timeout_ms", "idle_timeout_ms must be null or in [5000, 30000]"}
		}
		td.IdleTimeoutMs = *p.IdleTimeoutMs
	}
	if p.CreateResponse != nil {
		td.CreateResponse = *p.CreateResponse
	}
	if p.InterruptResponse != nil {
		td.InterruptResponse = *p.InterruptResponse
	}
	return td, nil
}
