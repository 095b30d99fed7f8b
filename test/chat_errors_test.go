package test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
)

type chatErrorBody struct {
	Error *struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// requireChatError checks an OpenAI-shaped error answer; param and code are checked when not "".
func requireChatError(t *testing.T, resp *http.Response, status int, param, code string) {
	t.Helper()
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, status, resp.StatusCode, string(raw))
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var b chatErrorBody
	require.NoError(t, json.Unmarshal(raw, &b), string(raw))
	require.NotNil(t, b.Error, string(raw))
	require.NotEmpty(t, b.Error.Message)
	require.NotEmpty(t, b.Error.Type)
	if param != "" {
		require.NotNil(t, b.Error.Param, string(raw))
		require.Equal(t, param, *b.Error.Param)
	}
	if code != "" {
		require.NotNil(t, b.Error.Code, string(raw))
		require.Equal(t, code, *b.Error.Code)
	}
}

func testChatErrors(t *testing.T, f *chatFixture) {
	msgs := userText("hi")
	audioPart := func(data, format string) []map[string]any {
		return []map[string]any{{"role": "user", "content": []map[string]any{
			{"type": "input_audio", "input_audio": map[string]any{"data": data, "format": format}}}}}
	}
	silentWAV := audio.EncodeWAV(nil, 16000)
	oddRateWAV := audio.EncodeWAV(make([]float32, 1000), 96000) // above the 8–48 kHz the server resamples
	cases := []struct {
		name   string
		body   any
		status int
		param  string
		code   string
	}{
		{"invalid_json", `{"model":`, 400, "", "invalid_json"},
		{"not_an_object", `[1,2]`, 400, "", "invalid_json"},
		{"missing_model", map[string]any{"messages": msgs}, 400, "model", "missing_required_parameter"},
		{"missing_messages", map[string]any{"model": chatModel}, 400, "messages", "missing_required_parameter"},
		{"empty_messages", map[string]any{"model": chatModel, "messages": []any{}}, 400, "messages", "missing_required_parameter"},
		{"unknown_model", map[string]any{"model": "gpt-4o", "messages": msgs}, 404, "model", "model_not_found"},
		{"bad_role", map[string]any{"model": chatModel, "messages": []map[string]any{{"role": "function", "content": "x"}}}, 400, "messages[0].role", "unsupported_value"},
		{"tool_message_without_call", map[string]any{"model": chatModel, "messages": []map[string]any{{"role": "tool", "content": "x"}}}, 400, "messages[0].tool_call_id", "missing_required_parameter"},
		{"empty_user", map[string]any{"model": chatModel, "messages": userText("")}, 400, "messages[0].content", "invalid_value"},
		{"content_type", map[string]any{"model": chatModel, "messages": []map[string]any{{"role": "user", "content": 5}}}, 400, "messages[0].content", "invalid_type"},
		{"temperature_high", map[string]any{"model": chatModel, "messages": msgs, "temperature": 2.5}, 400, "temperature", "invalid_value"},
		{"temperature_negative", map[string]any{"model": chatModel, "messages": msgs, "temperature": -0.1}, 400, "temperature", "invalid_value"},
		{"top_p_zero", map[string]any{"model": chatModel, "messages": msgs, "top_p": 0}, 400, "top_p", "invalid_value"},
		{"top_p_high", map[string]any{"model": chatModel, "messages": msgs, "top_p": 1.5}, 400, "top_p", "invalid_value"},
		{"max_tokens_zero", map[string]any{"model": chatModel, "messages": msgs, "max_tokens": 0}, 400, "max_tokens", "invalid_value"},
		{"max_tokens_huge", map[string]any{"model": chatModel, "messages": msgs, "max_tokens": 1 << 30}, 400, "max_tokens", "invalid_value"},
		{"max_completion_tokens_negative", map[string]any{"model": chatModel, "messages": msgs, "max_completion_tokens": -1}, 400, "max_completion_tokens", "invalid_value"},
		{"seed_negative", map[string]any{"model": chatModel, "messages": msgs, "seed": -1}, 400, "seed", "invalid_value"},
		{"stop_type", map[string]any{"model": chatModel, "messages": msgs, "stop": 5}, 400, "stop", "invalid_type"},
		{"stop_too_many", map[string]any{"model": chatModel, "messages": msgs, "stop": []string{"a", "b", "c", "d", "e"}}, 400, "stop", "invalid_value"},
		{"stream_options_without_stream", map[string]any{"model": chatModel, "messages": msgs, "stream_options": map[string]any{"include_usage": true}}, 400, "stream_options", "invalid_value"},
		{"modality_unknown", map[string]any{"model": chatModel, "messages": msgs, "modalities": []string{"text", "image"}}, 400, "modalities", "invalid_value"},
		{"audio_format_mp3", map[string]any{"model": chatModel, "messages": msgs, "modalities": []string{"text", "audio"}, "audio": map[string]any{"format": "mp3"}}, 400, "audio.format", "unsupported_value"},
		{"stream_audio_wav", map[string]any{"model": chatModel, "messages": msgs, "stream": true, "modalities": []string{"text", "audio"}, "audio": map[string]any{"format": "wav"}}, 400, "audio.format", "unsupported_value"},
		{"n_9", map[string]any{"model": chatModel, "messages": msgs, "n": 9}, 400, "n", "invalid_value"},
		{"n_0", map[string]any{"model": chatModel, "messages": msgs, "n": 0}, 400, "n", "invalid_value"},
		{"tool_bad_name", map[string]any{"model": chatModel, "messages": msgs, "tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "no spaces"}}}}, 400, "tools[0].function.name", "invalid_value"},
		{"tool_duplicate", map[string]any{"model": chatModel, "messages": msgs, "tools": []map[string]any{
			{"type": "function", "function": map[string]any{"name": "f"}}, {"type": "function", "function": map[string]any{"name": "f"}}}}, 400, "tools[1].function.name", "invalid_value"},
		{"tool_custom", map[string]any{"model": chatModel, "messages": msgs, "tools": []map[string]any{{"type": "custom", "custom": map[string]any{"name": "f"}}}}, 400, "tools[0].type", "unsupported_value"},
		{"tool_schema_not_object", map[string]any{"model": chatModel, "messages": msgs, "tools": []map[string]any{
			{"type": "function", "function": map[string]any{"name": "f", "parameters": map[string]any{"type": "string"}}}}}, 400, "tools[0].function.parameters", "invalid_value"},
		{"tool_choice_unknown", map[string]any{"model": chatModel, "messages": msgs, "tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "f"}}},
			"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "g"}}}, 400, "tool_choice", "invalid_value"},
		{"tool_choice_without_tools", map[string]any{"model": chatModel, "messages": msgs, "tool_choice": "required"}, 400, "tool_choice", "invalid_value"},
		{"top_logprobs_without_logprobs", map[string]any{"model": chatModel, "messages": msgs, "top_logprobs": 2}, 400, "top_logprobs", "invalid_value"},
		{"top_logprobs_21", map[string]any{"model": chatModel, "messages": msgs, "logprobs": true, "top_logprobs": 21}, 400, "top_logprobs", "invalid_value"},
		{"presence_penalty_high", map[string]any{"model": chatModel, "messages": msgs, "presence_penalty": 2.01}, 400, "presence_penalty", "invalid_value"},
		{"frequency_penalty_low", map[string]any{"model": chatModel, "messages": msgs, "frequency_penalty": -2.5}, 400, "frequency_penalty", "invalid_value"},
		{"logit_bias_value", map[string]any{"model": chatModel, "messages": msgs, "logit_bias": map[string]any{"10": 150}}, 400, "logit_bias", "invalid_value"},
		{"logit_bias_key", map[string]any{"model": chatModel, "messages": msgs, "logit_bias": map[string]any{"word": 1}}, 400, "logit_bias", "invalid_value"},
		// Checked by the engine against the model's vocabulary, still before anything runs.
		{"logit_bias_outside_vocab", map[string]any{"model": chatModel, "messages": msgs, "logit_bias": map[string]any{"99999999": 1}}, 400, "logit_bias", "invalid_value"},
		{"logit_bias_outside_vocab_stream", map[string]any{"model": chatModel, "messages": msgs, "stream": true, "logit_bias": map[string]any{"99999999": 1}}, 400, "logit_bias", "invalid_value"},
		{"response_format_type", map[string]any{"model": chatModel, "messages": msgs, "response_format": map[string]any{"type": "yaml"}}, 400, "response_format.type", "invalid_value"},
		{"response_format_bad_schema", map[string]any{"model": chatModel, "messages": msgs, "response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "x", "schema": map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"$ref": "#/nowhere"}}}}}}, 400, "response_format.json_schema.schema", "invalid_value"},
		{"unknown_audio_id", map[string]any{"model": chatModel, "messages": []map[string]any{
			{"role": "user", "content": "hi"}, {"role": "assistant", "audio": map[string]any{"id": "audio_0123456789abcdef"}}, {"role": "user", "content": "more"}}},
			400, "messages[1].audio.id", "invalid_value"},
		{"assistant_without_content", map[string]any{"model": chatModel, "messages": []map[string]any{
			{"role": "user", "content": "hi"}, {"role": "assistant", "content": nil}, {"role": "user", "content": "more"}}},
			400, "messages[1].content", "invalid_value"},
		{"image_part", map[string]any{"model": chatModel, "messages": []map[string]any{{"role": "user", "content": []map[string]any{
			{"type": "image_url", "image_url": map[string]any{"url": "https://example.com/a.png"}}}}}}, 400, "messages[0].content[0]", "unsupported_content_type"},
		{"audio_not_base64", map[string]any{"model": chatModel, "messages": audioPart("!!!not base64", "wav")}, 400, "messages[0].content[0].input_audio.data", "invalid_value"},
		{"audio_empty_data", map[string]any{"model": chatModel, "messages": audioPart("", "wav")}, 400, "messages[0].content[0].input_audio.data", "invalid_value"},
		{"audio_not_wav", map[string]any{"model": chatModel, "messages": audioPart(b64([]byte("this is not a RIFF file at all")), "wav")}, 400, "messages[0].content[0].input_audio.data", "invalid_value"},
		{"audio_wav_no_samples", map[string]any{"model": chatModel, "messages": audioPart(b64(silentWAV), "wav")}, 400, "messages[0].content[0].input_audio.data", "invalid_value"},
		{"audio_wav_odd_rate", map[string]any{"model": chatModel, "messages": audioPart(b64(oddRateWAV), "wav")}, 400, "messages[0].content[0].input_audio.data", "invalid_value"},
		{"audio_pcm16_odd_length", map[string]any{"model": chatModel, "messages": audioPart(b64([]byte{1, 2, 3}), "pcm16")}, 400, "messages[0].content[0].input_audio.data", "invalid_value"},
		{"audio_format_mp3_in", map[string]any{"model": chatModel, "messages": audioPart(b64([]byte{1, 2}), "mp3")}, 400, "messages[0].content[0].input_audio.format", "unsupported_value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireChatError(t, postChat(t, context.Background(), f.url, tc.body), tc.status, tc.param, tc.code)
		})
	}
	t.Run("method", func(t *testing.T) {
		resp, err := http.Get(f.url + "/chat/completions")
		require.NoError(t, err)
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
		resp.Body.Close()
	})
	// None of the refused requests reached the engine.
	require.Zero(t, f.plain.Live())
}
