package test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/testenv"
)

// TestLiveSDKQuickstart runs GPT-Live's WebSocket quick-start with the official Node SDK's
// LiveWS (openai 7.55.0, pinned by test/openai-live/package-lock.json) against the real binary,
// changing only baseURL and the key: the quick-start's session (Responses delegation with
// web_search) starts, real speech streamed at real time is transcribed, the model answers by
// itself as paced audio with its transcript, speaking over it silences it, mute and the
// appends are acknowledged, usage comes on the timeline and session.closed carries the final
// usage before the socket closes 1000. No error event.
func TestLiveSDKQuickstart(t *testing.T) {
	t.Parallel()
	speech := "/usr/share/pocketsphinx/test/data/goforward.raw"
	testenv.NeedFile(t, speech, "pocketsphinx-testdata")
	s := startLiveBinary(t, "--api-key", "sk-live-test")
	last, stderr := runNode(t, "openai-live", "quickstart.mjs", 4*time.Minute, "OPENAI_BASE_URL=http://"+s.addr+"/v1", "OPENAI_API_KEY=sk-live-test", "OMNISERVE_SPEECH="+speech)
	var got struct {
		Errors           []string          `json:"errors"`
		Events           map[string]int    `json:"events"`
		InputTranscript  string            `json:"input_transcript"`
		OutputTranscript string            `json:"output_transcript"`
		AudioBytes       int               `json:"audio_bytes"`
		Acks             map[string][3]any `json:"acks"`
		Usage            []float64         `json:"usage"`
		Muted            bool              `json:"muted"`
		Unmuted          bool              `json:"unmuted"`
		Started          map[string]any    `json:"started"`
		Closed           *struct {
			Reason string             `json:"reason"`
			Usage  map[string]float64 `json:"usage"`
			ID     string             `json:"id"`
		} `json:"closed"`
		CloseCode        int                `json:"close_code"`
		BargeInSilenceMs float64            `json:"barge_in_silence_ms"`
		Pacing           map[string]float64 `json:"pacing"`
		TimelineOK       bool               `json:"timeline_ok"`
	}
	require.NoError(t, json.Unmarshal([]byte(last), &got), last)
	t.Logf("GPT-Live SDK quick-start: %s", last)
	t.Logf("stderr: %s", stderr)
	require.Empty(t, got.Errors, "no error")
	require.Zero(t, got.Events["error"])
	require.Equal(t, "gpt-live-1", got.Started["model"])
	require.Equal(t, "responses", got.Started["delegation"].(map[string]any)["type"], "the quick-start's Responses delegation is accepted")
	require.Contains(t, got.InputTranscript, "forward")
	require.NotEmpty(t, strings.TrimSpace(got.OutputTranscript), "the model's reply has its transcript")
	require.True(t, got.TimelineOK)
	require.Greater(t, got.AudioBytes, 48000, "the reply is audio")
	require.LessOrEqual(t, got.Pacing["audio_s"], got.Pacing["wall_s"]+0.35, "paced at real time: %v", got.Pacing)
	require.Less(t, got.BargeInSilenceMs, 1500.0, "speaking over the reply silences it")
	require.Equal(t, "evt_instr", got.Acks["instructions"][2])
	require.Equal(t, "evt_think", got.Acks["thinking"][2])
	require.True(t, got.Muted)
	require.True(t, got.Unmuted)
	require.Equal(t, 1, got.Events["session.input_audio.muted"])
	require.Equal(t, 1, got.Events["session.input_audio.unmuted"])
	require.NotEmpty(t, got.Usage)
	require.Equal(t, 15.0, got.Usage[0])
	require.NotNil(t, got.Closed, "session.closed came")
	require.Equal(t, "close_requested", got.Closed.Reason)
	require.GreaterOrEqual(t, got.Closed.Usage["seconds"], got.Usage[len(got.Usage)-1])
	require.Equal(t, got.Started["id"], got.Closed.ID)
	require.Equal(t, 1000, got.CloseCode)
}
