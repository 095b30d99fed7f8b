package test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/testenv"
)

// guideResult is what test/browser/webrtc_guide.html POSTs to /result.
type guideResult struct {
	OK             bool           `json:"ok"`
	Error          string         `json:"error"`
	Steps          []string       `json:"steps"`
	Events         map[string]int `json:"events"`
	Errors         []any          `json:"errors"`
	CallStatus     int            `json:"callStatus"`
	Location       string         `json:"location"`
	Transcript     string         `json:"transcript"`
	ResponseStatus string         `json:"responseStatus"`
	HangupStatus   int            `json:"hangupStatus"`
	SpeechStopped  *float64       `json:"speechStoppedMs"`
	Committed      *float64       `json:"committedMs"`
	AudioStarted   *float64       `json:"audioStartedMs"`
	FirstPacket    *float64       `json:"firstPacketMs"`
	Statuses       []string       `json:"responseStatuses"`
	BargeIn        *struct {
		PacketsPlaying         int     `json:"packetsPlaying"`
		PacketsAtClear         int     `json:"packetsAtClear"`
		PacketsAfter           int     `json:"packetsAfter"`
		LastPacketAfterClearMs float64 `json:"lastPacketAfterClearMs"`
		ClearedAfterMs         float64 `json:"clearedAfterMs"`
		AudioEndMs             float64 `json:"audioEndMs"`
	} `json:"bargeIn"`
	Inbound struct {
		PacketsReceived  int     `json:"packetsReceived"`
		BytesReceived    int     `json:"bytesReceived"`
		TotalAudioEnergy float64 `json:"totalAudioEnergy"`
		PacketsLost      int     `json:"packetsLost"`
		Jitter           float64 `json:"jitter"`
		Codec            string  `json:"codec"`
	} `json:"inbound"`
}

// TestWebRTCBrowser runs OpenAI's WebRTC guide flow in Debian's headless Chromium against
// bin/omniserve: the page (served on loopback by this test, another origin than omniserve's)
// gets an ek_ key from its backend, sends its fake microphone (Chromium playing the
// pocketsphinx "go forward ten meters" WAV) with an SDP offer to /v1/realtime/calls, and reports
// what it saw on oai-events and in getStats: session.created, the user's transcript, a response,
// its audio received over RTP as Opus (no audio deltas on the channel), and the hangup closing
// the data channel.
func TestWebRTCBrowser(t *testing.T) {
	srv, raw := runWebRTCPage(t, "webrtc_guide.html", `{"session":{"type":"realtime","instructions":"Answer in one word.","max_output_tokens":8}}`, nil)
	var got guideResult
	require.NoError(t, json.Unmarshal(raw, &got), string(raw))
	pretty, _ := json.MarshalIndent(got, "", "  ")
	t.Logf("page result:\n%s", pretty)
	require.True(t, got.OK, "page failed: %s\nserver:\n%s", got.Error, srv.logs.String())
	require.Equal(t, http.StatusCreated, got.CallStatus)
	require.Regexp(t, `^/v1/realtime/calls/rtc_[0-9a-f]+$`, got.Location, "Location is readable cross-origin (CORS expose)")
	require.Equal(t, 1, got.Events["session.created"])
	require.Contains(t, strings.ToLower(got.Transcript), "forward")
	// completed, or incomplete at the minted max_output_tokens
	require.Contains(t, []string{"completed", "incomplete"}, got.ResponseStatus)
	require.Positive(t, got.Events["output_audio_buffer.started"])
	require.Zero(t, got.Events["response.output_audio.delta"], "no audio deltas on the data channel")
	require.Empty(t, got.Errors)
	require.Positive(t, got.Inbound.PacketsReceived, "the answer's audio arrived over RTP")
	require.Positive(t, got.Inbound.BytesReceived)
	require.Positive(t, got.Inbound.TotalAudioEnergy, "the received audio is not silence (Chromium's decoded level)")
	require.Equal(t, "audio/opus", strings.ToLower(got.Inbound.Codec))
	// Barge-in: the long reply was cancelled while it played, its audio stopped (the remote
	// packet count stopped growing well before the 2 s the page watched) and the item was
	// truncated to what had been played.
	require.NotNil(t, got.BargeIn)
	require.Len(t, got.Statuses, 2)
	require.Equal(t, "cancelled", got.Statuses[1], "the long reply was cut, not finished")
	require.Positive(t, got.Events["output_audio_buffer.cleared"])
	require.Greater(t, got.BargeIn.PacketsAtClear, got.BargeIn.PacketsPlaying, "the reply's audio was flowing in the 200 ms before the clear")
	require.Positive(t, got.BargeIn.AudioEndMs, "truncated to the audio played")
	require.Less(t, got.BargeIn.LastPacketAfterClearMs, 1000.0, "remote audio kept coming after the clear")
	t.Logf("barge-in in the page: output_audio_buffer.clear sent → cleared event %.0f ms, last remote RTP packet %.0f ms "+
		"(getStats, 20 ms polling); %d packets after the clear; item truncated at %.0f ms",
		got.BargeIn.ClearedAfterMs, got.BargeIn.LastPacketAfterClearMs, got.BargeIn.PacketsAfter-got.BargeIn.PacketsAtClear, got.BargeIn.AudioEndMs)
	require.Equal(t, http.StatusOK, got.HangupStatus)
	if got.Committed != nil && got.FirstPacket != nil {
		t.Logf("in the page: input_audio_buffer.committed → first remote RTP packet (getStats, 20 ms polling): %.0f ms; "+
			"packets %d, bytes %d, lost %d, jitter %.4f s, totalAudioEnergy %.6f",
			*got.FirstPacket-*got.Committed, got.Inbound.PacketsReceived, got.Inbound.BytesReceived, got.Inbound.PacketsLost,
			got.Inbound.Jitter, got.Inbound.TotalAudioEnergy)
	}
	require.Eventually(t, func() bool {
		code, _ := srv.get(t, "/ready")
		return code == http.StatusOK
	}, 5*time.Second, 50*time.Millisecond)
}

// runWebRTCPage serves test/browser/<page> as an app on its own origin (another origin than
// omniserve's) and runs it in headless Chromium, whose fake microphone plays the "go forward
// ten meters" WAV, against a fresh bin/omniserve (API key "sk", CORS for the app). The app's
// backend mints an ek_ key for secretBody at /token and hangs up the call the page names at
// /hangup?call=<Location>; static serves more paths (prefix → directory). It returns the server
// and the JSON the page POSTed to /result.
func runWebRTCPage(t *testing.T, page, secretBody string, static map[string]string) (*binServer, json.RawMessage) {
	t.Helper()
	return runWebRTCPageEnv(t, page, secretBody, static, nil)
}

// runWebRTCPageEnv is runWebRTCPage with extra environment variables (KEY=value) for omniserve.
func runWebRTCPageEnv(t *testing.T, page, secretBody string, static map[string]string, env []string) (*binServer, json.RawMessage) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.Missing(t, "the browser test needs %s (make deps installs it)", chromiumPath)
	}
	page, query, _ := strings.Cut(page, "?") // the page's own parameters, if any
	html, err := os.ReadFile(filepath.Join(repoRoot(t), "test", "browser", page))
	require.NoError(t, err)
	limit := 4 * time.Minute
	if query != "" {
		// A page asked for more turns (latency.html?n=) runs longer: 4 turns of up to 7 s each.
		if q, err := url.ParseQuery(query); err == nil {
			if n, err := strconv.Atoi(q.Get("n")); err == nil && n > 5 {
				limit += time.Duration(n-5) * 4 * 7 * time.Second
			}
		}
		query = "&" + query
	}
	wav := speechWAV(t, 500*time.Millisecond, 3*time.Second)

	results := make(chan json.RawMessage, 1)
	// Set before the browser starts; atomic because the app's handlers run on the server's
	// goroutines and the race detector cannot see the browser launch between the two.
	var apiBase atomic.Value
	forward := func(w http.ResponseWriter, r *http.Request, path string, body io.Reader) {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, apiBase.Load().(string)+path, body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req.Header.Set("Authorization", "Bearer sk")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(html)
	})
	// The app's backend mints an ek_ key with the API key: the page never sees the API key.
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		forward(w, r, "/v1/realtime/client_secrets", strings.NewReader(secretBody))
	})
	mux.HandleFunc("/hangup", func(w http.ResponseWriter, r *http.Request) {
		loc := r.URL.Query().Get("call")
		if !strings.HasPrefix(loc, "/v1/realtime/calls/rtc_") {
			http.Error(w, "bad call", http.StatusBadRequest)
			return
		}
		forward(w, r, loc+"/hangup", nil)
	})
	mux.HandleFunc("/result", func(_ http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			b, _ = json.Marshal(map[string]string{"error": "reading the page's result: " + err.Error()})
		}
		select {
		case results <- b:
		default:
		}
	})
	for prefix, dir := range static {
		mux.Handle(prefix, http.StripPrefix(prefix, http.FileServer(http.Dir(dir))))
	}
	app := httptest.NewServer(mux)
	defer app.Close()

	srv := startBinaryEnv(t, env, "--api-key", "sk", "--cors-origins", app.URL)
	apiBase.Store("http://" + srv.addr)

	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var logs bytes.Buffer
	chrome := exec.CommandContext(ctx, chromiumPath,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
		"--user-data-dir="+t.TempDir(),
		"--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream", "--use-file-for-fake-audio-capture="+wav,
		"--autoplay-policy=no-user-gesture-required", "--allow-loopback-in-peer-connection",
		app.URL+"/?api="+apiBase.Load().(string)+query)
	chrome.Stdout, chrome.Stderr = &logs, &logs
	// Chromium forks renderers and helpers: its own process group, killed as one at the end.
	chrome.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	chrome.Cancel = func() error { return syscall.Kill(-chrome.Process.Pid, syscall.SIGKILL) }
	chrome.WaitDelay = 5 * time.Second
	require.NoError(t, chrome.Start())
	exited := make(chan error, 1)
	go func() { exited <- chrome.Wait() }()
	stop := func() {
		_ = syscall.Kill(-chrome.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	select {
	case got := <-results:
		stop()
		return srv, got
	case err := <-exited:
		t.Fatalf("chromium exited before the page reported: %v\n%s", err, logs.String())
	case <-ctx.Done():
		stop()
		t.Fatalf("the page did not report within 4 minutes\nchromium:\n%s\nserver:\n%s", logs.String(), srv.logs.String())
	}
	return nil, nil
}
