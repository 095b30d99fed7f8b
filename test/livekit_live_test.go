package test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/testenv"
)

// liveKitRun is the outcome of test/livekit-live/gpt_live.mjs.
type liveKitRun struct {
	Errors           []string            `json:"errors"`
	Events           map[string]int      `json:"events"`
	InputTranscript  string              `json:"input_transcript"`
	InputFinal       bool                `json:"input_final"`
	OutputTranscript string              `json:"output_transcript"`
	AudioSamples     int                 `json:"audio_samples"`
	SpeechStarted    int                 `json:"speech_started"`
	Acks             map[string][2]int64 `json:"acks"`
	UsageS           []float64           `json:"usage_s"`
	Closed           *struct {
		Reason string             `json:"reason"`
		Usage  map[string]float64 `json:"usage"`
	} `json:"closed"`
	Delegations []struct {
		Target     string `json:"target"`
		ResponseID string `json:"response_id"`
	} `json:"delegations"`
	FunctionCalls []struct {
		Name string `json:"name"`
		Args string `json:"args"`
	} `json:"function_calls"`
	TaskEvents             []string `json:"task_events"`
	TranscriptBeforeResult string   `json:"transcript_before_result"`
}

// runLiveKit runs gpt_live.mjs against s with delegation (client or responses).
func runLiveKit(t *testing.T, s *binServer, key, delegation string) liveKitRun {
	t.Helper()
	speech := "/usr/share/pocketsphinx/test/data/goforward.raw"
	testenv.NeedFile(t, speech, "pocketsphinx-testdata")
	last, stderr := runNode(t, "livekit-live", "gpt_live.mjs", 4*time.Minute, "OMNISERVE_BASE_URL=http://"+s.addr+"/v1",
		"OMNISERVE_API_KEY="+key, "OMNISERVE_SPEECH="+speech, "OMNISERVE_DELEGATION="+delegation)
	var got liveKitRun
	require.NoError(t, json.Unmarshal([]byte(last), &got), last)
	require.Empty(t, got.Errors, "stderr: %s", stderr)
	require.Equal(t, 1, got.Events["session.started"])
	require.Contains(t, got.InputTranscript, "forward", "the plugin's user turn holds the input transcript")
	require.True(t, got.InputFinal, "the plugin ended the user's turn from the transcript's timing")
	require.Greater(t, got.AudioSamples, 24000/2, "the reply's audio came out of the plugin's audio stream")
	require.NotNil(t, got.Closed, "the plugin's close drained session.closed")
	require.Equal(t, "close_requested", got.Closed.Reason)
	return got
}

// TestLiveKitGPTLiveModel drives LiveKit's GPT-Live model (@livekit/agents-plugin-openai 1.9.0's
// GPTLiveModel, the framework's DuplexModel) directly, with no LiveKit server: the plugin's own
// session, configured as AgentSession configures it and fed real speech as 16 kHz microphone
// frames, against the real binary with only the API key and base URL changed (issue 39).
func TestLiveKitGPTLiveModel(t *testing.T) {
	t.Parallel()
	t.Run("client delegation", func(t *testing.T) {
		t.Parallel()
		s := startLiveBinary(t, "--api-key", "sk-livekit-test")
		got := runLiveKit(t, s, "sk-livekit-test", "client")
		require.GreaterOrEqual(t, got.SpeechStarted, 2, "the first utterance and the one over the reply are both heard")
		require.NotEmpty(t, strings.TrimSpace(got.OutputTranscript), "the reply's transcript reached the plugin")
		require.Equal(t, 1, got.Events["session.input_audio.muted"])
		require.Equal(t, 1, got.Events["session.input_audio.unmuted"])
		for _, ack := range []string{"session.instructions.appended", "session.thinking.appended"} {
			require.Contains(t, got.Acks, ack)
			require.Less(t, got.Acks[ack][0], got.Acks[ack][1], "%s is placed on the timeline", ack)
		}
		require.NotEmpty(t, got.UsageS)
		require.GreaterOrEqual(t, got.Closed.Usage["seconds"], got.UsageS[len(got.UsageS)-1])
	})
	// The plugin's default: Responses delegation with the agent's tools. The scripted decider
	// (--live-test-hooks) delegates the user's turn; the task on the local thinker calls the
	// LiveKit tool (forced), the plugin answers it as AgentSession does, and the task's text is
	// spoken.
	t.Run("responses delegation with a LiveKit tool", func(t *testing.T) {
		t.Parallel()
		s := startLiveBinary(t, "--api-key", "sk-livekit-test", "--live-test-hooks")
		got := runLiveKit(t, s, "sk-livekit-test", "responses")
		require.Len(t, got.Delegations, 1)
		require.Equal(t, "responses", got.Delegations[0].Target)
		require.NotEmpty(t, got.Delegations[0].ResponseID)
		require.Len(t, got.FunctionCalls, 1, "the plugin emitted the task's function call")
		require.Equal(t, "getWeather", got.FunctionCalls[0].Name)
		var args map[string]any
		require.NoError(t, json.Unmarshal([]byte(got.FunctionCalls[0].Args), &args), "the call's arguments are JSON")
		require.Contains(t, args, "location", "the arguments follow the tool's zod schema")
		require.Equal(t, []string{"response.created", "response.completed", "response.created", "response.completed"},
			lifecycle(got.TaskEvents), "the call's response, then the one continued with its output")
		require.Contains(t, got.TaskEvents, "response.output_text.delta", "the continued task answered in text")
		require.Greater(t, len(got.OutputTranscript), len(got.TranscriptBeforeResult), "the task's result was spoken with its transcript")
	})
}

// lifecycle are the response.created / .completed / .failed / .incomplete events of evs, in order.
func lifecycle(evs []string) []string {
	var out []string
	for _, e := range evs {
		switch e {
		case "response.created", "response.completed", "response.failed", "response.incomplete":
			out = append(out, e)
		}
	}
	return out
}
