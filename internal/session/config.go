package session

import (
	"encoding/json"
	"fmt"
	"github.com/omniserve/omniserve/internal/duplex"
	"strings"
	"time"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/speech"
)

// AudioFormat is an audio encoding (pcm16 | pcm_f32le | g711_ulaw | g711_alaw, after
// NormalizeInputFormat) and its sample rate in Hz (g711 is always 8000). It is the session's
// own: a dialect translator converts its wire's format into it (internal/realtime: the
// protocol's AudioFormat has the same fields).
type AudioFormat struct {
	Type string
	Rate int
}

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

// TurnDetectionPatch is a turn_detection object as the client sent it: the values of the keys
// it carried, in the session's own TurnDetection, and which keys those were. An absent key
// takes the default of its type (an object replaces the previous setting as a whole); an absent
// idle_timeout_ms is null. A dialect translator builds it from its wire's object
// (internal/realtime/openai), so the patch declares no vocabulary of its own: a new key of
// turn_detection is a field of TurnDetection (or of duplex.TurnDetection) and a bit of
// TurnDetectionKeys.
type TurnDetectionPatch struct {
	Value TurnDetection
	Keys  TurnDetectionKeys
}

// TurnDetectionKeys is the set of turn_detection keys a client sent (TurnDetectionPatch.Keys).
type TurnDetectionKeys uint8

// The keys of turn_detection, one bit each.
const (
	TurnKeyType TurnDetectionKeys = 1 << iota
	TurnKeyThreshold
	TurnKeyPrefixPadding
	TurnKeySilenceDuration
	TurnKeyIdleTimeout
	TurnKeyCreateResponse
	TurnKeyInterruptResponse
	TurnKeyEagerness
)

// Has reports whether every key of keys was sent.
func (k TurnDetectionKeys) Has(keys TurnDetectionKeys) bool { return k&keys == keys }

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
	MCP             []MCPTool
	IdleTimeout     time.Duration
	MaxOutputTokens int // 0 = unlimited (engine default)
	Temperature     *float64
	// Seed (extension extra_body.seed) makes sampling reproducible; nil = a fresh random seed
	// per response unless the server's configuration sets one.
	Seed *uint32
	// Tracing is session.tracing as the client set it, echoed in the session. omniserve
	// uploads no traces to OpenAI; its own traces go to the OTLP endpoint (docs/STATS.md).
	Tracing any
	// Truncation keeps the conversation the model reads within its context (truncation.go);
	// the zero value is "auto".
	Truncation duplex.Truncation
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
	Tracing    any // nil, "auto" or the tracing object (validated by the dialect's decoder)
	// MCPTools are the `type: "mcp"` entries of tools (with ToolsSet).
	MCPTools []MCPTool
	// TranscriptLogprobs is include when present: whether it names
	// item.input_audio_transcription.logprobs.
	TranscriptLogprobs *bool
	// Truncation is session.truncation when present (validated by applyTruncation).
	Truncation *duplex.Truncation
}

// FieldError is a validation failure with the OpenAI error code and the offending parameter.
type FieldError struct {
	Code, Param, Message string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s (%s)", e.Code, e.Message, e.Param) }

// Apply returns cfg with p applied, or a *FieldError: the first of its fields that is refused,
// in the order below (TestConfigPatchApplyRefusals pins it: the client is told of that one).
func (p ConfigPatch) Apply(cfg Config) (Config, error) {
	steps := [...]func(ConfigPatch, *Config) *FieldError{
		ConfigPatch.applyModel, ConfigPatch.applyModalities, ConfigPatch.applyInstructions,
		ConfigPatch.applyVoice, ConfigPatch.applyInputFormat, ConfigPatch.applyOutputFormat,
		ConfigPatch.checkType, ConfigPatch.applyTranscription, ConfigPatch.applyTools,
		ConfigPatch.applyTranscriptLogprobs, ConfigPatch.applyNoiseReduction,
		ConfigPatch.applyTurnDetection, ConfigPatch.applyTracing, ConfigPatch.applyIdleTimeout,
		ConfigPatch.applyAutoResponse, ConfigPatch.applyMaxOutputTokens, ConfigPatch.applySampling,
		ConfigPatch.applyTruncation,
	}
	// Each step applies one field (or a few checked together) to cfg, or refuses it and leaves
	// cfg as it was.
	for _, step := range steps {
		if fe := step(p, &cfg); fe != nil {
			return cfg, fe
		}
	}
	return cfg, nil
}

func (p ConfigPatch) applyModel(cfg *Config) *FieldError {
	if p.Model != nil {
		// The session checked the name (settings.resolveModel): every name it accepts is this
		// server's one model.
		cfg.Model = *p.Model
	}
	return nil
}

func (p ConfigPatch) applyModalities(cfg *Config) *FieldError {
	if p.Modalities == nil {
		return nil
	}
	for _, m := range p.Modalities {
		if m != "text" && m != "audio" {
			return &FieldError{"invalid_value", "session.modalities", fmt.Sprintf("unsupported modality %q", m)}
		}
	}
	if len(p.Modalities) == 0 {
		return &FieldError{"invalid_value", "session.modalities", "at least one modality is required"}
	}
	cfg.Modalities = append([]string(nil), p.Modalities...)
	return nil
}

func (p ConfigPatch) applyInstructions(cfg *Config) *FieldError {
	if p.Instructions != nil {
		cfg.Instructions = *p.Instructions
	}
	return nil
}

func (p ConfigPatch) applyVoice(cfg *Config) *FieldError {
	if p.Voice == nil {
		return nil
	}
	if v := strings.TrimSpace(*p.Voice); v == "" || len(v) > 64 {
		return &FieldError{"invalid_value", "session.audio.output.voice", "voice must be a non-empty string of at most 64 characters"}
	}
	cfg.Voice = *p.Voice
	return nil
}

func (p ConfigPatch) applyInputFormat(cfg *Config) *FieldError {
	if p.InputFormat == nil {
		return nil
	}
	f, err := NormalizeInputFormat(*p.InputFormat)
	if err != nil {
		return &FieldError{"unsupported_audio_format", "session.input_audio_format", err.Error()}
	}
	cfg.InputFormat = f
	return nil
}

func (p ConfigPatch) applyOutputFormat(cfg *Config) *FieldError {
	if p.OutputFormat == nil {
		return nil
	}
	f, err := NormalizeOutputFormat(*p.OutputFormat)
	if err != nil {
		return &FieldError{"unsupported_audio_format", "session.output_audio_format", err.Error()}
	}
	cfg.OutputFormat = f
	return nil
}

// checkType refuses a session type other than realtime and transcription; which one a session
// may name is settings.transcriptionUpdateError's rule.
func (p ConfigPatch) checkType(*Config) *FieldError {
	if p.Type != nil && *p.Type != "realtime" && *p.Type != "transcription" {
		return &FieldError{"invalid_value", "session.type", fmt.Sprintf("Invalid value for 'session.type': %q. Supported values are: \"realtime\" and \"transcription\".", *p.Type)}
	}
	return nil
}

func (p ConfigPatch) applyTranscription(cfg *Config) *FieldError {
	if p.TranscriptionSet {
		cfg.Transcription = p.Transcription
	}
	return nil
}

// applyTools checks the tools and the choice together: a choice may name a tool of the same
// patch, or of the session's.
func (p ConfigPatch) applyTools(cfg *Config) *FieldError {
	if !p.ToolsSet && p.ToolChoice == nil {
		return nil
	}
	tools, choice := cfg.Tools, cfg.ToolChoice
	if p.ToolsSet {
		tools = p.Tools
	}
	if p.ToolChoice != nil {
		choice = *p.ToolChoice
	}
	if fe := checkTools(tools, choice, 0, "session"); fe != nil {
		return fe
	}
	cfg.Tools, cfg.ToolChoice = tools, choice
	if p.ToolsSet {
		cfg.MCP = p.MCPTools
	}
	return nil
}

func (p ConfigPatch) applyTranscriptLogprobs(cfg *Config) *FieldError {
	if p.TranscriptLogprobs != nil {
		cfg.TranscriptLogprobs = *p.TranscriptLogprobs
	}
	return nil
}

func (p ConfigPatch) applyNoiseReduction(cfg *Config) *FieldError {
	if !p.NoiseReductionSet {
		return nil
	}
	switch p.NoiseReduction {
	case "", speech.NoiseNearField, speech.NoiseFarField:
		cfg.NoiseReduction = p.NoiseReduction
		return nil
	}
	return &FieldError{"invalid_value", "session.audio.input.noise_reduction.type",
		fmt.Sprintf("noise_reduction type %q is not supported (near_field or far_field)", p.NoiseReduction)}
}

func (p ConfigPatch) applyTurnDetection(cfg *Config) *FieldError {
	if !p.TurnDetectionSet {
		return nil
	}
	if p.TurnDetection == nil {
		cfg.TurnDetection = nil
		return nil
	}
	td, fe := resolveTurnDetection(p.TurnDetection, cfg.defaultTurnDetection())
	if fe != nil {
		return fe
	}
	cfg.TurnDetection = td
	return nil
}

func (p ConfigPatch) applyTracing(cfg *Config) *FieldError {
	if p.TracingSet {
		cfg.Tracing = p.Tracing
	}
	return nil
}

func (p ConfigPatch) applyIdleTimeout(cfg *Config) *FieldError {
	if p.IdleTimeoutS == nil {
		return nil
	}
	if *p.IdleTimeoutS <= 0 {
		return &FieldError{"invalid_value", "session.idle_timeout_s", "idle_timeout_s must be positive"}
	}
	cfg.IdleTimeout = time.Duration(*p.IdleTimeoutS * float64(time.Second))
	return nil
}

// applyAutoResponse: the native extension is server_vad with create_response (plus, on
// ?duplex=1, the engine's listen / speak decisions). On a session without turn detection it
// keeps that session's listen-only overlap: interrupt_response false.
func (p ConfigPatch) applyAutoResponse(cfg *Config) *FieldError {
	if p.AutoResponse == nil {
		return nil
	}
	td := cfg.defaultTurnDetection()
	td.InterruptResponse = false
	if cfg.TurnDetection != nil {
		td = cfg.TurnDetection.copy()
	}
	td.CreateResponse = *p.AutoResponse
	if *p.AutoResponse || cfg.TurnDetection != nil {
		cfg.TurnDetection = td
	}
	return nil
}

func (p ConfigPatch) applyMaxOutputTokens(cfg *Config) *FieldError {
	if p.MaxOutputTokens == nil {
		return nil
	}
	if *p.MaxOutputTokens < 0 || *p.MaxOutputTokens > maxOutputTokensLimit {
		return &FieldError{"invalid_value", "session.max_output_tokens", "must be an integer in [1, 4096] or \"inf\""}
	}
	cfg.MaxOutputTokens = *p.MaxOutputTokens
	return nil
}

// applySampling sets the seed and the temperature, which any value may take.
func (p ConfigPatch) applySampling(cfg *Config) *FieldError {
	if p.Seed != nil {
		cfg.Seed = p.Seed
	}
	if p.Temperature != nil {
		cfg.Temperature = p.Temperature
	}
	return nil
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

// resolveTurnDetection validates a turn_detection object and fills its defaults from td; the
// first refusal wins, in the order of the steps below.
func resolveTurnDetection(p *TurnDetectionPatch, td *TurnDetection) (*TurnDetection, *FieldError) {
	if p.Keys.Has(TurnKeyType) {
		td.Type = p.Value.Type
	}
	steps := [...]func(*TurnDetectionPatch, *TurnDetection) *FieldError{
		resolveVADType, resolveThreshold, resolvePrefixPadding, resolveSilence, resolveIdleTimeoutMs,
	}
	for _, step := range steps {
		if fe := step(p, td); fe != nil {
			return nil, fe
		}
	}
	if p.Keys.Has(TurnKeyCreateResponse) {
		td.CreateResponse = p.Value.CreateResponse
	}
	if p.Keys.Has(TurnKeyInterruptResponse) {
		td.InterruptResponse = p.Value.InterruptResponse
	}
	return td, nil
}

// turnDetectionParam is the param of turn_detection's refusals.
const turnDetectionParam = "session.audio.input.turn_detection"

// resolveVADType checks the type; semantic_vad takes its eagerness (auto unless given) and the
// silence it maps to.
func resolveVADType(p *TurnDetectionPatch, td *TurnDetection) *FieldError {
	switch td.Type {
	case "server_vad":
		return nil
	case "semantic_vad":
		td.Eagerness = "auto"
		if p.Keys.Has(TurnKeyEagerness) {
			switch e := p.Value.Eagerness; e {
			case "low", "medium", "high", "auto":
				td.Eagerness = e
			default:
				return &FieldError{"invalid_value", turnDetectionParam + ".eagerness", fmt.Sprintf("eagerness %q is not one of low, medium, high, auto", e)}
			}
		}
		td.SilenceDurationMs = SemanticSilenceMs(td.Eagerness)
		return nil
	}
	return &FieldError{"invalid_value", turnDetectionParam + ".type", fmt.Sprintf("turn_detection type %q is not supported (use server_vad, semantic_vad or null)", td.Type)}
}

// resolveThreshold: 0 keeps the default.
func resolveThreshold(p *TurnDetectionPatch, td *TurnDetection) *FieldError {
	if !p.Keys.Has(TurnKeyThreshold) {
		return nil
	}
	if v := p.Value.Threshold; v < 0 || v > 1 || v != v {
		return &FieldError{"invalid_value", turnDetectionParam + ".threshold", "threshold must be in [0, 1]"}
	}
	if p.Value.Threshold > 0 {
		td.Threshold = p.Value.Threshold
	}
	return nil
}

func resolvePrefixPadding(p *TurnDetectionPatch, td *TurnDetection) *FieldError {
	if !p.Keys.Has(TurnKeyPrefixPadding) {
		return nil
	}
	if fe := msInRange(p.Value.PrefixPaddingMs, "prefix_padding_ms"); fe != nil {
		return fe
	}
	td.PrefixPaddingMs = p.Value.PrefixPaddingMs
	return nil
}

// resolveSilence: server_vad only (semantic_vad's silence follows its eagerness); 0 keeps the
// default.
func resolveSilence(p *TurnDetectionPatch, td *TurnDetection) *FieldError {
	if !p.Keys.Has(TurnKeySilenceDuration) || td.Type != "server_vad" {
		return nil
	}
	if fe := msInRange(p.Value.SilenceDurationMs, "silence_duration_ms"); fe != nil {
		return fe
	}
	if p.Value.SilenceDurationMs > 0 {
		td.SilenceDurationMs = p.Value.SilenceDurationMs
	}
	return nil
}

// msInRange refuses a duration (field name) outside [0, 10000] ms.
func msInRange(ms int, name string) *FieldError {
	if ms < 0 {
		return &FieldError{"integer_below_min_value", turnDetectionParam + "." + name, name + " must be >= 0"}
	}
	if ms > 10000 {
		return &FieldError{"integer_above_max_value", turnDetectionParam + "." + name, name + " must be <= 10000"}
	}
	return nil
}

func resolveIdleTimeoutMs(p *TurnDetectionPatch, td *TurnDetection) *FieldError {
	if !p.Keys.Has(TurnKeyIdleTimeout) {
		return nil
	}
	if ms := p.Value.IdleTimeoutMs; ms < 5000 || ms > 30000 {
		return &FieldError{"invalid_value", turnDetectionParam + ".idle_timeout_ms", "idle_timeout_ms must be null or in [5000, 30000]"}
	}
	td.IdleTimeoutMs = p.Value.IdleTimeoutMs
	return nil
}

// MCPTool is one `type: "mcp"` entry of session.tools as the client declared it. Index is its
// position in session.tools, for error params; AllowedTools and RequireApproval are kept as
// sent (an array of names or {tool_names, read_only}; "always", "never" or a filter) and parsed
// by mcp.go, which owns their rules.
type MCPTool struct {
	Index             int
	ServerLabel       string
	ServerURL         string
	ServerDescription string
	Headers           map[string]string
	Authorization     string
	AllowedTools      json.RawMessage
	RequireApproval   json.RawMessage
}
