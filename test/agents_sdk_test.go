package test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/testenv"
)

// TestAgentsSDKQuickstart runs the OpenAI Agents SDK's voice-agent quick-start
// (@openai/agents-realtime, pinned by test/agents-sdk/package-lock.json) against the real
// server with no server-specific option: the SDK opens the session without a model, its first
// session.update names its own default model ("gpt-realtime-…", a served alias) with the agent's
// instructions and semantic_vad, then sends "tracing": "auto". The instructions must be applied,
// the spoken turn transcribed and answered with audio, and no error event sent.
func TestAgentsSDKQuickstart(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node is not installed: skipping the Agents SDK quick-start (`make deps` installs it)")
	}
	speech := "/usr/share/pocketsphinx/test/data/goforward.raw"
	testenv.NeedFile(t, speech, "pocketsphinx-testdata")
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--cache-dir", filepath.Join(t.TempDir(), "cache"))

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := npmProject(ctx, t, "agents-sdk")

	run := exec.CommandContext(ctx, node, "quickstart.mjs")
	run.Dir = dir
	run.Env = append(os.Environ(), "OMNISERVE_WS_URL=ws://"+s.addr+"/v1/realtime", "OMNISERVE_SPEECH="+speech)
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	require.NoError(t, run.Run(), "quickstart.mjs failed:\nstdout: %s\nstderr: %s", stdout.String(), stderr.String())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var got struct {
		Errors        []string       `json:"errors"`
		Events        map[string]int `json:"events"`
		AudioBytes    int            `json:"audio_bytes"`
		Instructions  string         `json:"instructions"`
		Model         string         `json:"model"`
		TurnDetection string         `json:"turn_detection"`
		Transcript    string         `json:"transcript"`
		Tracing       any            `json:"tracing"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &got), stdout.String())
	t.Logf("Agents SDK quick-start: %s", lines[len(lines)-1])
	require.Empty(t, got.Errors, "no error event")
	require.Zero(t, got.Events["error"])
	require.Equal(t, "You are a helpful assistant", got.Instructions, "the agent's instructions are applied")
	require.True(t, strings.HasPrefix(got.Model, "gpt-realtime"), "the SDK's default model is the session's: %q", got.Model)
	require.Equal(t, "semantic_vad", got.TurnDetection)
	require.Equal(t, 2, got.Events["session.updated"], "both of the SDK's updates are accepted")
	require.Equal(t, "auto", got.Tracing, "the SDK's tracing setting is applied and echoed, not dropped")
	require.Contains(t, got.Transcript, "forward")
	require.GreaterOrEqual(t, got.AudioBytes, 48000, "the turn is answered with audio")
}
