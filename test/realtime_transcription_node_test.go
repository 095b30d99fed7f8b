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

	"github.com/omniserve/omniserve/internal/audio"
)

// TestRealtimeTranscriptionOpenAINode: the official OpenAI Node SDK mints a client secret for a
// transcription session (client.realtime.clientSecrets.create) and opens it with
// OpenAIRealtimeWS over wss, then streams two spoken utterances separated by silence. Server
// VAD commits each; each gets transcription deltas and then its completed transcript, in the
// order spoken; no response event is ever sent, and no error.
func TestRealtimeTranscriptionOpenAINode(t *testing.T) {
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node is required (make deps installs it)")
	npm, err := exec.LookPath("npm")
	require.NoError(t, err, "npm is required (make deps installs it)")
	raw, err := os.ReadFile("/usr/share/pocketsphinx/test/data/goforward.raw")
	require.NoError(t, err, "install pocketsphinx-testdata")

	f := newChatFixture(t)
	srv := httptest.NewUnstartedServer(f.plainSrv.Handler())
	srv.StartTLS()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	certFile := filepath.Join(dir, "cert.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	pcm16k, err := audio.PCM16BytesToFloat32(nil, raw)
	require.NoError(t, err)
	pcm24k, err := audio.Resample(pcm16k, 16000, 24000)
	require.NoError(t, err)
	speechFile := filepath.Join(dir, "speech24k.pcm")
	require.NoError(t, os.WriteFile(speechFile, audio.Float32ToPCM16Bytes(nil, pcm24k), 0o600))

	sdkDir := filepath.Join(repoRoot(t), "test", "openai-node")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund")
	install.Dir = sdkDir
	out, err := install.CombinedOutput()
	require.NoError(t, err, "npm install in %s:\n%s", sdkDir, out)

	run := exec.CommandContext(ctx, node, "transcription.mjs")
	run.Dir = sdkDir
	run.Env = append(os.Environ(), "OMNISERVE_BASE_URL="+srv.URL+"/v1", "OMNISERVE_SPEECH_24K="+speechFile, "NODE_EXTRA_CA_CERTS="+certFile)
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	require.NoError(t, run.Run(), "transcription.mjs failed:\nstdout: %s\nstderr: %s", stdout.String(), stderr.String())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var got struct {
		MintedType   string         `json:"minted_type"`
		MintedObject string         `json:"minted_object"`
		SessionType  string         `json:"session_type"`
		Events       map[string]int `json:"events"`
		Errors       []any          `json:"errors"`
		Items        []struct {
			ID                   string `json:"id"`
			Deltas               string `json:"deltas"`
			DeltaEvents          int    `json:"delta_events"`
			DeltaBeforeCompleted bool   `json:"delta_before_completed"`
			Transcript           string `json:"transcript"`
			CompletedIndex       int    `json:"completed_index"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &got), stdout.String())
	t.Logf("OpenAI Node SDK transcription session: %s", lines[len(lines)-1])
	require.Empty(t, got.Errors)
	require.Equal(t, "transcription", got.MintedType)
	require.Equal(t, "realtime.transcription_session", got.MintedObject)
	require.Equal(t, "transcription", got.SessionType, "the ek_ key opened a transcription session")
	require.Len(t, got.Items, 2, "two utterances, two committed items")
	for i, it := range got.Items {
		require.Equal(t, i, it.CompletedIndex, "completed in the order spoken")
		require.Contains(t, strings.ToLower(it.Transcript), "forward", "item %d", i)
		require.Positive(t, it.DeltaEvents, "item %d had deltas", i)
		require.True(t, it.DeltaBeforeCompleted, "item %d: deltas came before completed", i)
		require.Equal(t, it.Transcript, it.Deltas, "item %d: the deltas concatenate to the transcript", i)
	}
	for typ := range got.Events {
		require.False(t, strings.HasPrefix(typ, "response."), "a transcription session never responds: %s", typ)
	}
}
