package test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAgentsSDKWebRTCBrowser runs the OpenAI Agents SDK in headless Chromium: the page imports
// @openai/agents-realtime's own browser bundle (pinned by test/agents-sdk/package-lock.json)
// and connects a RealtimeAgent with OpenAIRealtimeWebRTC and an ek_ key, as the SDK's browser
// guide does, baseUrl aside. The fake microphone's "go forward ten meters" must be transcribed
// and answered over RTP (Opus, audible level), the SDK's interrupt() must cut a long reply
// (audio stops, the item is truncated to what was played), and the app's hangup must end the
// call, all without an error event.
func TestAgentsSDKWebRTCBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := npmProject(ctx, t, "agents-sdk")

	srv, raw := runWebRTCPage(t, "agents_webrtc.html", `{"session":{"type":"realtime","max_output_tokens":8}}`,
		map[string]string{"/sdk/": filepath.Join(dir, "node_modules", "@openai", "agents-realtime", "dist", "bundle")})
	var got struct {
		OK           bool           `json:"ok"`
		Error        string         `json:"error"`
		Steps        []string       `json:"steps"`
		Events       map[string]int `json:"events"`
		Errors       []string       `json:"errors"`
		Statuses     []string       `json:"statuses"`
		Instructions string         `json:"instructions"`
		Transcript   string         `json:"transcript"`
		HangupStatus int            `json:"hangupStatus"`
		Inbound      struct {
			PacketsReceived  int     `json:"packetsReceived"`
			TotalAudioEnergy float64 `json:"totalAudioEnergy"`
			Codec            string  `json:"codec"`
		} `json:"inbound"`
		BargeIn *struct {
			PacketsPlaying         int     `json:"packetsPlaying"`
			PacketsAtClear         int     `json:"packetsAtClear"`
			PacketsAfter           int     `json:"packetsAfter"`
			LastPacketAfterClearMs float64 `json:"lastPacketAfterClearMs"`
			ClearedAfterMs         float64 `json:"clearedAfterMs"`
			AudioEndMs             float64 `json:"audioEndMs"`
		} `json:"bargeIn"`
	}
	require.NoError(t, json.Unmarshal(raw, &got), string(raw))
	pretty, _ := json.MarshalIndent(got, "", "  ")
	t.Logf("page result:\n%s", pretty)
	require.True(t, got.OK, "page failed: %s\nserver:\n%s", got.Error, srv.logs.String())
	require.Empty(t, got.Errors, "no error event")
	require.Equal(t, "Answer in one word.", got.Instructions, "the agent's instructions are applied")
	require.Contains(t, strings.ToLower(got.Transcript), "forward")
	require.Zero(t, got.Events["response.output_audio.delta"], "no audio deltas on the data channel")
	require.Positive(t, got.Inbound.PacketsReceived, "the answer's audio arrived over RTP")
	require.Positive(t, got.Inbound.TotalAudioEnergy, "the received audio is not silence")
	require.Equal(t, "audio/opus", strings.ToLower(got.Inbound.Codec))
	require.NotNil(t, got.BargeIn)
	require.Equal(t, "cancelled", got.Statuses[len(got.Statuses)-1], "interrupt() cut the long reply")
	require.Greater(t, got.BargeIn.PacketsAtClear, got.BargeIn.PacketsPlaying, "the reply's audio was flowing before the interrupt")
	require.Positive(t, got.BargeIn.AudioEndMs, "truncated to the audio played")
	require.Less(t, got.BargeIn.LastPacketAfterClearMs, 1000.0, "remote audio kept coming after the interrupt")
	t.Logf("Agents SDK interrupt(): cleared event %.0f ms, last remote RTP packet %.0f ms after it (getStats, 20 ms polling); item truncated at %.0f ms",
		got.BargeIn.ClearedAfterMs, got.BargeIn.LastPacketAfterClearMs, got.BargeIn.AudioEndMs)
	require.Equal(t, http.StatusOK, got.HangupStatus)
}
