package openai_test

import (
	"encoding/json"
	"github.com/omniserve/omniserve/internal/duplex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/openai"
	"github.com/omniserve/omniserve/internal/session"
)

// conversation is a realtime session's view with every part set.
func conversation() session.SessionView {
	seed := uint32(9)
	return session.SessionView{ID: "duplex-1", ExpiresAt: time.Unix(1700000000, 0), Model: "omni", Instructions: "Be brief.",
		Input: session.InputView{Format: session.AudioFormat{Type: "pcm16", Rate: 16000},
			TurnDetection:  &session.TurnDetection{TurnDetection: duplex.TurnDetection{Type: "server_vad", Threshold: 0.5, PrefixPaddingMs: 300, SilenceDurationMs: 500}, CreateResponse: true, InterruptResponse: true},
			Transcription:  &session.InputTranscription{Model: "pocketsphinx", Language: "en"},
			NoiseReduction: "near_field", TranscriptLogprobs: true},
		Output: session.OutputView{Audio: true, Format: session.AudioFormat{Type: "g711_ulaw", Rate: 8000}, Voice: "alloy", Speed: 1},
		Tools: session.ToolsView{Functions: []duplex.Tool{{Name: "f", Description: "d", Parameters: json.RawMessage(`{"type": "object"}`)}},
			MCP:    []session.MCPServerView{{Label: "docs", URL: "https://mcp.example", AllowedTools: json.RawMessage(`["a"]`)}},
			Choice: session.ToolChoice{Mode: "function", Function: "f"}},
		MaxOutputTokens: 0, Temperature: 0.6, Seed: &seed, IdleTimeout: 90 * time.Second, OverlapPolicy: "barge_in_on_speech",
		Duplex: true, AutoResponse: true, State: "active", TurnState: "listening", Epoch: 2, Turn: 3,
		Capabilities: session.SessionCapabilities{BargeIn: true, AudioTruncate: true, Resume: true, FullDuplex: true,
			ChunkPeriodMs: 100, TargetBargeInLatencyMs: 100, BargeInMinSpeechMs: 240, BargeInPitchedSpeechMs: 150,
			MaxOutputLead: 500 * time.Millisecond}}
}

// encode is the frame the connection writes for a session effect.
func encode(t *testing.T, e session.Effect, beta bool) (string, map[string]any) {
	t.Helper()
	ev, ok := openai.EncodeSession(e)
	require.True(t, ok)
	data, err := protocol.Encode(ev, protocol.Envelope{Type: ev.EventType(), EventID: "event_1"}, beta)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	return ev.EventType(), m["session"].(map[string]any)
}

func TestEncodeSessionNames(t *testing.T) {
	tx := session.SessionView{Transcription: true}
	tests := []struct {
		name   string
		effect session.Effect
		want   string
	}{
		{"created", session.SessionCreated{View: conversation()}, "session.created"},
		{"updated", session.SessionUpdated{View: conversation()}, "session.updated"},
		{"transcription session, GA names", session.SessionCreated{View: tx}, "session.created"},
		{"transcription session, legacy created", session.SessionCreated{View: tx, LegacyNames: true}, "transcription_session.created"},
		{"transcription session, legacy updated", session.SessionUpdated{View: tx, LegacyNames: true}, "transcription_session.updated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, ok := openai.EncodeSession(tc.effect)
			require.True(t, ok)
			require.Equal(t, tc.want, ev.EventType())
		})
	}
	_, ok := openai.EncodeSession(nil)
	require.False(t, ok, "not a session effect")
}

func TestEncodeSessionResumeToken(t *testing.T) {
	ev, ok := openai.EncodeSession(session.SessionCreated{View: conversation(), ResumeToken: "rt_1"})
	require.True(t, ok)
	require.Equal(t, "rt_1", ev.(protocol.SessionCreated).ResumeToken)
}

// The realtime.session object, GA and beta, from a view.
func TestEncodeSessionConversation(t *testing.T) {
	_, s := encode(t, session.SessionUpdated{View: conversation()}, false)
	require.Equal(t, "duplex-1", s["id"])
	require.Equal(t, "realtime.session", s["object"])
	require.Equal(t, "realtime", s["type"])
	require.Equal(t, float64(1700000000), s["expires_at"])
	require.Equal(t, "inf", s["max_output_tokens"], "0 is unlimited")
	require.Equal(t, []any{"audio"}, s["output_modalities"])
	require.Equal(t, []any{protocol.IncludeLogprobs}, s["include"])
	require.Equal(t, float64(90), s["idle_timeout_s"])
	require.Equal(t, map[string]any{"auto_response": true, "seed": float64(9)}, s["extra_body"])
	require.Equal(t, []any{
		map[string]any{"type": "function", "name": "f", "description": "d", "parameters": map[string]any{"type": "object"}},
		map[string]any{"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example", "allowed_tools": []any{"a"}},
	}, s["tools"])
	require.Equal(t, map[string]any{"type": "function", "name": "f"}, s["tool_choice"])
	audio := s["audio"].(map[string]any)
	in := audio["input"].(map[string]any)
	require.Equal(t, map[string]any{"type": "audio/pcm", "rate": float64(16000)}, in["format"])
	require.Equal(t, float64(16000), in["sample_rate_hz"])
	require.Equal(t, map[string]any{"type": "near_field"}, in["noise_reduction"])
	require.Equal(t, map[string]any{"model": "pocketsphinx", "language": "en", "prompt": ""}, in["transcription"])
	require.Equal(t, true, in["turn_detection"].(map[string]any)["create_response"])
	require.Equal(t, map[string]any{"format": map[string]any{"type": "audio/pcmu"}, "voice": "alloy", "speed": float64(1)}, audio["output"])
	caps := s["capabilities"].(map[string]any)
	require.Equal(t, float64(500), caps["max_output_lead_ms"])
	require.Equal(t, true, caps["supports_session_resume"])

	_, b := encode(t, session.SessionUpdated{View: conversation()}, true)
	require.Equal(t, "pcm16", b["input_audio_format"])
	require.Equal(t, "g711_ulaw", b["output_audio_format"])
	require.Equal(t, []any{"text", "audio"}, b["modalities"])
	require.Equal(t, 0.6, b["temperature"])
	require.Equal(t, "alloy", b["voice"])
}

// Defaults: no tools are [] and choice auto, no logprobs is include null, text output.
func TestEncodeSessionEmpty(t *testing.T) {
	_, s := encode(t, session.SessionCreated{View: session.SessionView{MaxOutputTokens: 256}}, false)
	require.Equal(t, []any{}, s["tools"])
	require.Equal(t, "auto", s["tool_choice"])
	require.Nil(t, s["include"])
	require.Equal(t, float64(256), s["max_output_tokens"])
	require.Equal(t, []any{"text"}, s["output_modalities"])
	in := s["audio"].(map[string]any)["input"].(map[string]any)
	require.Nil(t, in["turn_detection"])
	require.Nil(t, in["transcription"])
	require.Nil(t, in["noise_reduction"])
}

// A transcription session's object: no output, and turn_detection without response flags.
func TestEncodeSessionTranscription(t *testing.T) {
	v := conversation()
	v.Transcription = true
	_, s := encode(t, session.SessionCreated{View: v, LegacyNames: true}, false)
	require.Equal(t, "realtime.transcription_session", s["object"])
	require.Equal(t, "transcription", s["type"])
	audio := s["audio"].(map[string]any)
	require.NotContains(t, audio, "output")
	td := audio["input"].(map[string]any)["turn_detection"].(map[string]any)
	require.NotContains(t, td, "create_response")
	require.NotContains(t, td, "interrupt_response")
	require.Equal(t, map[string]any{"supports_session_resume": true}, s["capabilities"])
	require.NotContains(t, s, "tools")
}
