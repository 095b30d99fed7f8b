package protocol

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// session.tracing is kept as sent ("auto", null, the configuration object) so that the session
// can echo it; any other value is refused with its param.
func TestDecodeTracing(t *testing.T) {
	tests := []struct {
		name      string
		tracing   string
		want      any
		wantCode  string
		wantParam string
	}{
		{"auto (the Agents SDK's default)", `"auto"`, "auto", "", ""},
		{"null", `null`, nil, "", ""},
		{"object", `{"workflow_name":"w","group_id":"g","metadata":{"k":"v"}}`,
			map[string]any{"workflow_name": "w", "group_id": "g", "metadata": map[string]any{"k": "v"}}, "", ""},
		{"other string", `"on"`, nil, "invalid_value", "session.tracing"},
		{"number", `1`, nil, "invalid_type", "session.tracing"},
		{"bad workflow_name", `{"workflow_name":3}`, nil, "invalid_type", "session.tracing.workflow_name"},
		{"bad metadata", `{"metadata":"x"}`, nil, "invalid_type", "session.tracing.metadata"},
		{"unknown field", `{"sample_rate":1}`, nil, "unknown_parameter", "session.tracing.sample_rate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := DecodeClientEvent([]byte(`{"type":"session.update","session":{"type":"realtime","tracing":` + tt.tracing + `}}`))
			if tt.wantCode != "" {
				require.NotNil(t, err)
				require.Equal(t, tt.wantCode, err.Code)
				require.Equal(t, tt.wantParam, err.Param)
				return
			}
			require.Nil(t, err)
			p := ev.(*SessionUpdate).Session
			require.True(t, p.TracingSet)
			require.Equal(t, tt.want, p.Tracing)
		})
	}
}

// session.include decodes to whether input transcription logprobs are asked for; absent
// leaves the setting as it is, null and [] turn them off, in both dialects and in
// transcription_session.update.
func TestDecodeInclude(t *testing.T) {
	on, off := true, false
	tests := []struct {
		name, event string
		want        *bool
	}{
		{"GA", `{"type":"session.update","session":{"type":"realtime","include":["item.input_audio_transcription.logprobs"]}}`, &on},
		{"GA transcription", `{"type":"session.update","session":{"type":"transcription","include":["item.input_audio_transcription.logprobs"]}}`, &on},
		{"beta transcription", `{"type":"transcription_session.update","session":{"input_audio_format":"pcm16","include":["item.input_audio_transcription.logprobs"]}}`, &on},
		{"empty", `{"type":"session.update","session":{"include":[]}}`, &off},
		{"null", `{"type":"session.update","session":{"include":null}}`, &off},
		{"absent", `{"type":"session.update","session":{"instructions":"x"}}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := DecodeClientEvent([]byte(tt.event))
			require.Nil(t, err)
			require.Equal(t, tt.want, ev.(*SessionUpdate).Session.TranscriptLogprobs)
		})
	}
}

// Session fields omniserve cannot honour are refused with their param; the values that change
// nothing (what the Agents SDK sends) are accepted.
func TestDecodeRefusesUnhonouredSessionFields(t *testing.T) {
	tests := []struct {
		name, session, wantParam string
		wantCode                 string // "" = unsupported_value
	}{
		{"the Agents SDK's defaults", `"audio":{"input":{"noise_reduction":null},"output":{"speed":1}},"truncation":"auto","prompt":null,"include":[]`, "", ""},
		{"noise reduction is honoured", `"audio":{"input":{"noise_reduction":{"type":"near_field"}}}`, "", ""},
		{"truncation disabled is honoured", `"truncation":"disabled"`, "", ""},
		{"retention ratio is honoured", `"truncation":{"type":"retention_ratio","retention_ratio":0.5}`, "", ""},
		{"stored prompt", `"prompt":{"id":"pmpt_1"}`, "session.prompt", ""},
		{"include logprobs is honoured", `"include":["item.input_audio_transcription.logprobs"]`, "", ""},
		{"include unknown", `"include":["item.input_audio_transcription.logprobs","tokens"]`, "session.include", "invalid_value"},
		{"include not an array", `"include":"item.input_audio_transcription.logprobs"`, "session.include", "invalid_type"},
		{"speed", `"audio":{"output":{"speed":1.5}}`, "session.audio.output.speed", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeClientEvent([]byte(`{"type":"session.update","session":{"type":"realtime",` + tt.session + `}}`))
			if tt.wantParam == "" {
				require.Nil(t, err)
				return
			}
			require.NotNil(t, err)
			want := tt.wantCode
			if want == "" {
				want = "unsupported_value"
			}
			require.Equal(t, want, err.Code, err.Message)
			require.Equal(t, tt.wantParam, err.Param)
		})
	}
}
