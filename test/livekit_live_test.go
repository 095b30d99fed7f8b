package test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/testenv"
)

// TestLiveKitGPTLiveModel drives LiveKit's GPT-Live model (@livekit/agents-plugin-openai 1.9.0's
// GPTLiveModel, the framework's DuplexModel) directly, with no LiveKit server: the plugin's own
// session, configured as AgentSession configures it and fed real speech as 16 kHz microphone
// frames, against the real binary with only the API key and base URL changed (issue 39). It
// uses client delegation; the plugin's default, Responses delegation, runs the agent's tools
// on the backend.
func TestLiveKitGPTLiveModel(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node is not installed: skipping LiveKit's GPT-Live model (`make deps` installs it)")
	}
	speech := "/usr/share/pocketsphinx/test/data/goforward.raw"
	testenv.NeedFile(t, speech, "pocketsphinx-testdata")
	s := startLiveBinary(t, "--api-key", "sk-livekit-test")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := npmProject(ctx, t, "livekit-live")
	run := exec.CommandContext(ctx, node, "gpt_live.mjs")
	run.Dir = dir
	run.Env = append(os.Environ(), "OMNISERVE_BASE_URL=http://"+s.addr+"/v1", "OMNISERVE_API_KEY=sk-livekit-test", "OMNISERVE_SPEECH="+speech)
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	require.NoError(t, run.Run(), "gpt_live.mjs failed:\nstdout: %s\nstderr: %s", stdout.String(), stderr.String())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	t.Logf("LiveKit GPTLiveModel: %s", lines[len(lines)-1])
	var got struct {
		Errors           []string            `json:"errors"`
		Events           map[string]int      `json:"events"`
		InputTranscript  string              `json:"input_transcript"`
		InputFinal       bool                `json:"input_final"`
		OutputTranscript string              `json:"output_transcript"`
		AudioSamples     int                 `json:"audio_samples"`
		SpeechStarted    int                 `json:"speech_started"`
		SpeechStopped    int                 `json:"speech_stopped"`
		Acks             map[string][2]int64 `json:"acks"`
		UsageS           []float64           `json:"usage_s"`
		Closed           *struct {
			Reason string             `json:"reason"`
			Usage  map[string]float64 `json:"usage"`
		} `json:"closed"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &got), stdout.String())
	require.Empty(t, got.Errors, "stderr: %s", stderr.String())
	require.Equal(t, 1, got.Events["session.started"])
	require.Contains(t, got.InputTranscript, "forward", "the plugin's user turn holds the input transcript")
	require.True(t, got.InputFinal, "the plugin ended the user's turn from the transcript's timing")
	require.GreaterOrEqual(t, got.SpeechStarted, 2, "the first utterance and the one over the reply are both heard")
	require.NotEmpty(t, strings.TrimSpace(got.OutputTranscript), "the reply's transcript reached the plugin")
	require.Greater(t, got.AudioSamples, 24000/2, "the reply's audio came out of the plugin's audio stream")
	require.Equal(t, 1, got.Events["session.input_audio.muted"])
	require.Equal(t, 1, got.Events["session.input_audio.unmuted"])
	for _, ack := range []string{"session.instructions.appended", "session.thinking.appended"} {
		require.Contains(t, got.Acks, ack)
		require.Less(t, got.Acks[ack][0], got.Acks[ack][1], "%s is placed on the timeline", ack)
	}
	require.NotEmpty(t, got.UsageS)
	require.NotNil(t, got.Closed, "the plugin's close drained session.closed")
	require.Equal(t, "close_requested", got.Closed.Reason)
	require.GreaterOrEqual(t, got.Closed.Usage["seconds"], got.UsageS[len(got.UsageS)-1])
}
