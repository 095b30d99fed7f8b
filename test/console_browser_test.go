package test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConsoleBrowser opens the console served by the real binary in headless Chromium, with
// real speech (goforward.raw, looped by Chromium's fake capture device) as the microphone, and
// lets test/browser/console.mjs (puppeteer-core, no browser download) check it through the
// page's own counters. Screenshots land in the test's artifact directory
// (go test ./test -run TestConsoleBrowser -artifacts -outputdir DIR keeps them).
func TestConsoleBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	node, dir := browserHarness(ctx, t)

	// The loop period holds a turn, its reply and the next utterance barging into that reply.
	wav := speechWAV(t, 500*time.Millisecond, 2*time.Second)
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--api-key", "console-key",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	out := t.ArtifactDir()
	// The page reaches the server through a proxy that the script arms to cut the connection
	// carrying the next assistant audio, without a close frame: a network drop mid-reply.
	proxy := startCutProxy(t, s.addr, `"type":"response.output_audio.delta"`, false)
	arm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		proxy.armed.Store(true)
	}))
	defer arm.Close()

	run := exec.CommandContext(ctx, node, "console.mjs")
	run.Dir = dir
	run.Env = append(os.Environ(), "OMNISERVE_URL=http://"+proxy.ln.Addr().String()+"/", "OMNISERVE_API_KEY=console-key",
		"SPEECH_WAV="+wav, "OUT_DIR="+out, "CHROMIUM="+chromiumPath, "CUT_URL="+arm.URL)
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	start := time.Now()
	runErr := run.Run()
	t.Logf("console.mjs (%s):\n%s%s", time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var got struct {
		OK              bool     `json:"ok"`
		Error           string   `json:"error"`
		UserTranscripts []string `json:"userTranscripts"`
		SamplesPlayed   int      `json:"samplesPlayed"`
		Connects        int      `json:"connects"`
		Reconnects      int      `json:"reconnects"`
		Resume          *struct {
			SessionID string `json:"sessionId"`
			Resumes   int    `json:"resumes"`
		} `json:"resume"`
		BargeIn *struct {
			Reason        string `json:"reason"`
			Dropped       int    `json:"dropped"`
			BufferedAfter int    `json:"bufferedAfter"`
		} `json:"bargeIn"`
		WebRTC *struct {
			RTP struct {
				Packets int     `json:"packets"`
				Energy  float64 `json:"energy"`
			} `json:"rtp"`
			Transcript string   `json:"transcript"`
			Turns      []string `json:"turns"`
		} `json:"webrtc"`
		Turns []struct {
			Status       string   `json:"status"`
			Reason       string   `json:"reason"`
			FirstAudioMs *float64 `json:"firstAudioMs"`
		} `json:"turns"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &got), "last line is the JSON summary")
	require.NoError(t, runErr, "console.mjs failed: %s\nserver log:\n%s", got.Error, s.logs.String())
	require.True(t, got.OK, got.Error)

	require.NotEmpty(t, got.UserTranscripts)
	require.Contains(t, strings.ToLower(strings.Join(got.UserTranscripts, " ")), "forward", "pocketsphinx heard the fake microphone")
	require.GreaterOrEqual(t, got.SamplesPlayed, 24000/2)
	require.NotNil(t, got.BargeIn)
	require.Positive(t, got.BargeIn.Dropped, "queued reply audio was dropped")
	require.Zero(t, got.BargeIn.BufferedAfter, "the playback buffer is empty after the barge-in")
	require.GreaterOrEqual(t, got.Reconnects, 1)
	require.True(t, proxy.cut.Load(), "the proxy cut a connection mid-reply")
	require.NotNil(t, got.Resume, "the console resumed after the cut")
	require.Equal(t, 1, got.Resume.Resumes)
	require.Contains(t, s.logs.String(), "session resumed")
	require.NotEmpty(t, got.Turns)
	// WebRTC, the console's default: the reply came as audible RTP and a barge-in cancelled one.
	require.NotNil(t, got.WebRTC, "the WebRTC step ran")
	require.Positive(t, got.WebRTC.RTP.Packets)
	require.Positive(t, got.WebRTC.RTP.Energy)
	require.Contains(t, got.WebRTC.Turns, "cancelled/turn_detected")
	t.Logf("console over WebRTC: %d RTP packets, transcript %q, turns %v", got.WebRTC.RTP.Packets, got.WebRTC.Transcript, got.WebRTC.Turns)
	for _, f := range []string{"console.png", "console-phone.png"} {
		st, err := os.Stat(filepath.Join(out, f))
		require.NoError(t, err)
		require.Greater(t, st.Size(), int64(10_000), "%s is a real screenshot", f)
	}
}
