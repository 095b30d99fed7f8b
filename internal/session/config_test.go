package session

import (
	"errors"
	"github.com/omniserve/omniserve/internal/duplex"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every refusal of ConfigPatch.Apply, with the code and the param the client is told.
func TestConfigPatchApplyRefusals(t *testing.T) {
	td := func(p *TurnDetectionPatch) ConfigPatch { return ConfigPatch{TurnDetectionSet: true, TurnDetection: p} }
	const tdp = "session.audio.input.turn_detection"
	tests := []struct {
		name, code, param, message string // message: a part of it
		patch                      ConfigPatch
	}{
		{"unknown modality", "invalid_value", "session.modalities", `unsupported modality "video"`,
			ConfigPatch{Modalities: []string{"text", "video"}}},
		{"no modality", "invalid_value", "session.modalities", "at least one modality",
			ConfigPatch{Modalities: []string{}}},
		{"blank voice", "invalid_value", "session.audio.output.voice", "non-empty", ConfigPatch{Voice: ptr("  ")}},
		{"long voice", "invalid_value", "session.audio.output.voice", "at most 64", ConfigPatch{Voice: ptr(strings.Repeat("v", 65))}},
		{"input format", "unsupported_audio_format", "session.input_audio_format", `"mp3"`,
			ConfigPatch{InputFormat: &AudioFormat{Type: "mp3"}}},
		{"input g711 rate", "unsupported_audio_format", "session.input_audio_format", "8000 Hz",
			ConfigPatch{InputFormat: &AudioFormat{Type: "g711_ulaw", Rate: 16000}}},
		{"input rate", "unsupported_audio_format", "session.input_audio_format", "sample rate",
			ConfigPatch{InputFormat: &AudioFormat{Type: "pcm16", Rate: 96000}}},
		{"output format", "unsupported_audio_format", "session.output_audio_format", `"opus"`,
			ConfigPatch{OutputFormat: &AudioFormat{Type: "opus"}}},
		{"output pcm rate", "unsupported_audio_format", "session.output_audio_format", "24000 Hz",
			ConfigPatch{OutputFormat: &AudioFormat{Type: "pcm16", Rate: 16000}}},
		{"session type", "invalid_value", "session.type", `"translation"`, ConfigPatch{Type: ptr("translation")}},
		{"tool name", "invalid_value", "session.tools[0].name", "invalid function name",
			ConfigPatch{ToolsSet: true, Tools: []duplex.Tool{{Name: "a b"}}}},
		{"tool choice without the tool", "invalid_value", "session.tool_choice", "not among the tools",
			ConfigPatch{ToolChoice: &ToolChoice{Mode: duplex.ToolChoiceFunction, Function: "f"}}},
		{"noise reduction", "invalid_value", "session.audio.input.noise_reduction.type", `"studio"`,
			ConfigPatch{NoiseReductionSet: true, NoiseReduction: "studio"}},
		{"vad type", "invalid_value", tdp + ".type", `"magic_vad"`, td(turnPatch(tdType("magic_vad")))},
		{"eagerness", "invalid_value", tdp + ".eagerness", `"eager"`,
			td(turnPatch(tdType("semantic_vad"), tdEagerness("eager")))},
		{"threshold below 0", "invalid_value", tdp + ".threshold", "[0, 1]", td(turnPatch(tdThreshold(-0.1)))},
		{"threshold above 1", "invalid_value", tdp + ".threshold", "[0, 1]", td(turnPatch(tdThreshold(1.5)))},
		{"threshold NaN", "invalid_value", tdp + ".threshold", "[0, 1]", td(turnPatch(tdThreshold(math.NaN())))},
		{"padding below 0", "integer_below_min_value", tdp + ".prefix_padding_ms", "prefix_padding_ms must be >= 0",
			td(turnPatch(tdPrefixPaddingMs(-5)))},
		{"padding above 10 s", "integer_above_max_value", tdp + ".prefix_padding_ms", "prefix_padding_ms must be <= 10000",
			td(turnPatch(tdPrefixPaddingMs(10001)))},
		{"silence below 0", "integer_below_min_value", tdp + ".silence_duration_ms", "silence_duration_ms must be >= 0",
			td(turnPatch(tdSilenceDurationMs(-1)))},
		{"silence above 10 s", "integer_above_max_value", tdp + ".silence_duration_ms", "silence_duration_ms must be <= 10000",
			td(turnPatch(tdSilenceDurationMs(10001)))},
		{"vad idle timeout below", "invalid_value", tdp + ".idle_timeout_ms", "[5000, 30000]",
			td(turnPatch(tdIdleTimeoutMs(4999)))},
		{"vad idle timeout above", "invalid_value", tdp + ".idle_timeout_ms", "[5000, 30000]",
			td(turnPatch(tdIdleTimeoutMs(30001)))},
		{"idle timeout", "invalid_value", "session.idle_timeout_s", "positive", ConfigPatch{IdleTimeoutS: ptr(0.0)}},
		{"max tokens below 0", "invalid_value", "session.max_output_tokens", "[1, 4096]", ConfigPatch{MaxOutputTokens: ptr(-1)}},
		{"max tokens above 4096", "invalid_value", "session.max_output_tokens", "[1, 4096]", ConfigPatch{MaxOutputTokens: ptr(4097)}},
		// The first refusal in Apply's order wins: the modalities come before the voice, the
		// formats before the type, the type before the turn detection, which comes before the
		// token limit; inside turn_detection, the type before the threshold.
		{"modalities before voice", "invalid_value", "session.modalities", "video",
			ConfigPatch{Modalities: []string{"video"}, Voice: ptr("")}},
		{"input format before type", "unsupported_audio_format", "session.input_audio_format", "mp3",
			ConfigPatch{InputFormat: &AudioFormat{Type: "mp3"}, Type: ptr("translation")}},
		{"type before turn detection", "invalid_value", "session.type", "translation",
			ConfigPatch{Type: ptr("translation"), TurnDetectionSet: true, TurnDetection: turnPatch(tdType("magic_vad"))}},
		{"turn detection before max tokens", "invalid_value", tdp + ".type", "magic_vad",
			ConfigPatch{MaxOutputTokens: ptr(-1), TurnDetectionSet: true, TurnDetection: turnPatch(tdType("magic_vad"))}},
		{"vad type before threshold", "invalid_value", tdp + ".type", "magic_vad",
			td(turnPatch(tdType("magic_vad"), tdThreshold(2.0)))},
		{"threshold before silence", "invalid_value", tdp + ".threshold", "[0, 1]",
			td(turnPatch(tdThreshold(2.0), tdSilenceDurationMs(-1)))},
	}
	base := newSettings(Options{}, ManagerConfig{ModelName: "omni", TurnDetection: defaultTurnDetection()}).cfg
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.patch.Apply(base)
			var fe *FieldError
			require.True(t, errors.As(err, &fe), "refused with a *FieldError: %v", err)
			require.Equal(t, tc.code, fe.Code)
			require.Equal(t, tc.param, fe.Param)
			require.Contains(t, fe.Message, tc.message)
			require.Equal(t, base.TurnDetection, got.TurnDetection, "a refused turn_detection changes nothing")
		})
	}
}

// What each step of ConfigPatch.Apply makes of an accepted field.
func TestConfigPatchApplyAccepted(t *testing.T) {
	td := func(p *TurnDetectionPatch) ConfigPatch { return ConfigPatch{TurnDetectionSet: true, TurnDetection: p} }
	vad := func(f func(*TurnDetection)) *TurnDetection {
		d := defaultTurnDetection()
		f(d)
		return d
	}
	seed := uint32(7)
	tests := []struct {
		name  string
		patch ConfigPatch
		want  func(*Config) // the base config, as the patch should leave it
	}{
		{"nothing", ConfigPatch{}, func(*Config) {}},
		{"model", ConfigPatch{Model: ptr("m2")}, func(c *Config) { c.Model = "m2" }},
		{"modalities copied", ConfigPatch{Modalities: []string{"text", "audio"}}, func(c *Config) { c.Modalities = []string{"text", "audio"} }},
		{"instructions", ConfigPatch{Instructions: ptr("Be brief.")}, func(c *Config) { c.Instructions = "Be brief." }},
		{"voice", ConfigPatch{Voice: ptr("ash")}, func(c *Config) { c.Voice = "ash" }},
		{"input alias", ConfigPatch{InputFormat: &AudioFormat{Type: "ulaw"}}, func(c *Config) { c.InputFormat = AudioFormat{Type: "g711_ulaw", Rate: 8000} }},
		{"output alias", ConfigPatch{OutputFormat: &AudioFormat{Type: "audio/pcma"}}, func(c *Config) { c.OutputFormat = AudioFormat{Type: "g711_alaw", Rate: 8000} }},
		{"transcription type", ConfigPatch{Type: ptr("transcription")}, func(*Config) {}},
		{"transcription off", ConfigPatch{TranscriptionSet: true}, func(c *Config) { c.Transcription = false }},
		{"tools", ConfigPatch{ToolsSet: true, Tools: []duplex.Tool{{Name: "f"}}, ToolChoice: &ToolChoice{Mode: duplex.ToolChoiceRequired}},
			func(c *Config) {
				c.Tools, c.ToolChoice = []duplex.Tool{{Name: "f"}}, ToolChoice{Mode: duplex.ToolChoiceRequired}
			}},
		{"logprobs", ConfigPatch{TranscriptLogprobs: ptr(true)}, func(c *Config) { c.TranscriptLogprobs = true }},
		{"noise reduction", ConfigPatch{NoiseReductionSet: true, NoiseReduction: "far_field"}, func(c *Config) { c.NoiseReduction = "far_field" }},
		{"turn detection null", ConfigPatch{TurnDetectionSet: true}, func(c *Config) { c.TurnDetection = nil }},
		{"server_vad zeros keep the defaults", td(turnPatch(tdThreshold(0.0), tdSilenceDurationMs(0), tdPrefixPaddingMs(0))),
			func(c *Config) { c.TurnDetection = vad(func(d *TurnDetection) { d.PrefixPaddingMs = 0 }) }},
		{"server_vad fields", td(turnPatch(tdThreshold(0.7), tdSilenceDurationMs(800), tdIdleTimeoutMs(6000),
			tdCreateResponse(false), tdInterruptResponse(false))),
			func(c *Config) {
				c.TurnDetection = vad(func(d *TurnDetection) {
					d.Threshold, d.SilenceDurationMs, d.IdleTimeoutMs, d.CreateResponse, d.InterruptResponse = 0.7, 800, 6000, false, false
				})
			}},
		{"semantic_vad ignores silence", td(turnPatch(tdType("semantic_vad"), tdSilenceDurationMs(900))),
			func(c *Config) {
				c.TurnDetection = vad(func(d *TurnDetection) { d.Type, d.Eagerness, d.SilenceDurationMs = "semantic_vad", "auto", 500 })
			}},
		{"tracing", ConfigPatch{TracingSet: true, Tracing: "auto"}, func(c *Config) { c.Tracing = "auto" }},
		{"idle timeout", ConfigPatch{IdleTimeoutS: ptr(1.5)}, func(c *Config) { c.IdleTimeout = 1500 * time.Millisecond }},
		{"auto_response off keeps the rest", ConfigPatch{AutoResponse: ptr(false)},
			func(c *Config) { c.TurnDetection = vad(func(d *TurnDetection) { d.CreateResponse = false }) }},
		{"max tokens inf", ConfigPatch{MaxOutputTokens: ptr(0)}, func(c *Config) { c.MaxOutputTokens = 0 }},
		{"max tokens", ConfigPatch{MaxOutputTokens: ptr(4096)}, func(c *Config) { c.MaxOutputTokens = 4096 }},
		{"sampling", ConfigPatch{Seed: &seed, Temperature: ptr(0.6)}, func(c *Config) { c.Seed, c.Temperature = &seed, ptr(0.6) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := newSettings(Options{}, ManagerConfig{ModelName: "omni", IdleTimeout: time.Minute, TurnDetection: defaultTurnDetection()}).cfg
			base.MaxOutputTokens = 100
			got, err := tc.patch.Apply(base)
			require.NoError(t, err)
			want := newSettings(Options{}, ManagerConfig{ModelName: "omni", IdleTimeout: time.Minute, TurnDetection: defaultTurnDetection()}).cfg
			want.MaxOutputTokens = 100
			tc.want(&want)
			require.Equal(t, want, got)
		})
	}
}

// turnPatch is a turn_detection object as a dialect's decoder builds it: each td* sets one key
// the client sent (its value, and its bit in Keys).
func turnPatch(keys ...func(*TurnDetectionPatch)) *TurnDetectionPatch {
	p := &TurnDetectionPatch{}
	for _, set := range keys {
		set(p)
	}
	return p
}

// tdKey sets one key: its value through field, and its bit.
func tdKey[T any](key TurnDetectionKeys, field func(*TurnDetection) *T, v T) func(*TurnDetectionPatch) {
	return func(p *TurnDetectionPatch) {
		*field(&p.Value) = v
		p.Keys |= key
	}
}

func tdType(v string) func(*TurnDetectionPatch) {
	return tdKey(TurnKeyType, func(td *TurnDetection) *string { return &td.Type }, v)
}

func tdThreshold(v float64) func(*TurnDetectionPatch) {
	return tdKey(TurnKeyThreshold, func(td *TurnDetection) *float64 { return &td.Threshold }, v)
}

func tdPrefixPaddingMs(v int) func(*TurnDetectionPatch) {
	return tdKey(TurnKeyPrefixPadding, func(td *TurnDetection) *int { return &td.PrefixPaddingMs }, v)
}

func tdSilenceDurationMs(v int) func(*TurnDetectionPatch) {
	return tdKey(TurnKeySilenceDuration, func(td *TurnDetection) *int { return &td.SilenceDurationMs }, v)
}

func tdIdleTimeoutMs(v int) func(*TurnDetectionPatch) {
	return tdKey(TurnKeyIdleTimeout, func(td *TurnDetection) *int { return &td.IdleTimeoutMs }, v)
}

func tdCreateResponse(v bool) func(*TurnDetectionPatch) {
	return tdKey(TurnKeyCreateResponse, func(td *TurnDetection) *bool { return &td.CreateResponse }, v)
}

func tdInterruptResponse(v bool) func(*TurnDetectionPatch) {
	return tdKey(TurnKeyInterruptResponse, func(td *TurnDetection) *bool { return &td.InterruptResponse }, v)
}

func tdEagerness(v string) func(*TurnDetectionPatch) {
	return tdKey(TurnKeyEagerness, func(td *TurnDetection) *string { return &td.Eagerness }, v)
}
