package test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sdkUsage is a response.done usage as the SDK client received it.
type sdkUsage struct {
	TotalTokens  int `json:"total_tokens"`
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	In           struct {
		Text          int `json:"text_tokens"`
		Audio         int `json:"audio_tokens"`
		Cached        int `json:"cached_tokens"`
		CachedDetails struct {
			Text  int `json:"text_tokens"`
			Audio int `json:"audio_tokens"`
		} `json:"cached_tokens_details"`
	} `json:"input_token_details"`
	Out struct {
		Text  int `json:"text_tokens"`
		Audio int `json:"audio_tokens"`
	} `json:"output_token_details"`
}

// TestRealtimeOpenAINode runs the official OpenAI Node SDK's GA realtime client
// (OpenAIRealtimeWS from openai/realtime/ws, which always dials wss) against the real server over
// TLS, with the real pipeline and real speech: session.created on connect, session.update,
// 24 kHz speech that server_vad turns into a response with audio and usage, then barge-in
// (output_audio_buffer.cleared, cancelled / turn_detected) and truncate, and an out-of-band
// response (conversation "none", own instructions, metadata). It never skips: node and
// npm are installed by `make deps`.
func TestRealtimeOpenAINode(t *testing.T) {
	srv, certFile := nodeTLSServer(t)
	// goforward.raw is 16 kHz; the SDK flow streams OpenAI's 24 kHz.
	last := runNodeScript(t, "realtime.mjs", "OMNISERVE_BASE_URL="+srv.URL+"/v1", "OMNISERVE_MODEL="+chatModel,
		"OMNISERVE_SPEECH_24K="+writeSpeech24k(t), "NODE_EXTRA_CA_CERTS="+certFile)
	var got struct {
		Events map[string]int `json:"events"`
		Turn1  struct {
			Transcript  string   `json:"transcript"`
			InputDeltas int      `json:"input_deltas"`
			Status      string   `json:"status"`
			AudioBytes  int      `json:"audio_bytes"`
			Usage       sdkUsage `json:"usage"`
		} `json:"turn1"`
		BargeIn struct {
			Reason string   `json:"reason"`
			Usage  sdkUsage `json:"usage"`
		} `json:"barge_in"`
		BadTruncate string `json:"bad_truncate"`
		OutOfBand   struct {
			Status string `json:"status"`
		} `json:"out_of_band"`
	}
	require.NoError(t, json.Unmarshal([]byte(last), &got), last)
	require.Contains(t, strings.ToLower(got.Turn1.Transcript), "forward", "24 kHz speech was heard as such")
	require.Positive(t, got.Turn1.AudioBytes)
	require.Positive(t, got.Turn1.InputDeltas, "input transcription deltas of the user's item (joined to its transcript: checked by the script)")
	// The script checked every usage field is an integer and that the parts add up; the totals
	// are checked here once more, as the client decoded them.
	for _, u := range []sdkUsage{got.Turn1.Usage, got.BargeIn.Usage} {
		require.Equal(t, u.InputTokens+u.OutputTokens, u.TotalTokens)
		require.Equal(t, u.In.Text+u.In.Audio, u.InputTokens)
		require.Equal(t, u.Out.Text+u.Out.Audio, u.OutputTokens)
	}
	require.Positive(t, got.Turn1.Usage.In.Text)
	require.Positive(t, got.Turn1.Usage.Out.Text)
	require.Zero(t, got.Turn1.Usage.In.Cached, "the first response has nothing cached")
	require.Positive(t, got.BargeIn.Usage.In.CachedDetails.Text, "the second response reads the first from the KV cache")
	require.Equal(t, "turn_detected", got.BargeIn.Reason)
	require.Equal(t, "invalid_value", got.BadTruncate)
	require.Equal(t, 1, got.Events["session.created"])
	require.Contains(t, []string{"completed", "incomplete"}, got.OutOfBand.Status, "out-of-band response")
}
