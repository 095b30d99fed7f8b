package test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/rtcclient"
)

// TestWebRTCSidebandOpenAINode: the server-side half of a call with the official OpenAI Node SDK.
// A WebRTC call is made (rtcclient, as a browser would); the app's backend joins it with
// OpenAIRealtimeWS({callID}) over wss, changes the instructions, adds a user message and asks
// for a response, which the call answers: session.updated and a finished response on the
// sideband, no error, and no audio deltas there (the audio is the call's RTP).
func TestWebRTCSidebandOpenAINode(t *testing.T) {
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node is required (make deps installs it)")
	npm, err := exec.LookPath("npm")
	require.NoError(t, err, "npm is required (make deps installs it)")

	f := newChatFixture(t)
	srv := httptest.NewUnstartedServer(f.plainSrv.Handler())
	srv.StartTLS()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	certFile := filepath.Join(dir, "cert.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	call, err := rtcclient.Dial(ctx, rtcclient.Config{BaseURL: srv.URL, Key: "unused", HTTP: srv.Client(),
		Session: json.RawMessage(`{"type":"realtime","audio":{"input":{"turn_detection":null}}}`)})
	require.NoError(t, err)
	defer call.Close()
	_, err = call.WaitFor(ctx, "session.created", 30*time.Second)
	require.NoError(t, err)

	sdkDir := filepath.Join(repoRoot(t), "test", "openai-node")
	install := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund")
	install.Dir = sdkDir
	out, err := install.CombinedOutput()
	require.NoError(t, err, "npm install in %s:\n%s", sdkDir, out)
	run := exec.CommandContext(ctx, node, "sideband.mjs")
	run.Dir = sdkDir
	run.Env = append(os.Environ(), "OMNISERVE_BASE_URL="+srv.URL+"/v1", "OMNISERVE_API_KEY=unused",
		"CALL_ID="+call.CallID(), "NODE_EXTRA_CA_CERTS="+certFile)
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	require.NoError(t, run.Run(), "sideband.mjs failed:\nstdout: %s\nstderr: %s", stdout.String(), stderr.String())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var got struct {
		Events       map[string]int `json:"events"`
		Errors       []any          `json:"errors"`
		Instructions string         `json:"instructions"`
		Status       string         `json:"status"`
		OutputTypes  []string       `json:"output_types"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &got), stdout.String())
	t.Logf("OpenAI Node SDK sideband: %s", lines[len(lines)-1])
	require.Empty(t, got.Errors)
	require.Equal(t, "Answer in one word.", got.Instructions, "the sideband's session.update applies to the call")
	require.Contains(t, []string{"completed", "incomplete"}, got.Status)
	require.Contains(t, got.OutputTypes, "message")
	require.Zero(t, got.Events["response.output_audio.delta"], "no audio deltas on a sideband")
	require.Positive(t, got.Events["response.output_audio_transcript.delta"]+got.Events["response.output_text.delta"])
	// The call heard the same conversation: its data channel got the response too.
	_, err = call.WaitFor(ctx, "response.done", 30*time.Second)
	require.NoError(t, err)
}
