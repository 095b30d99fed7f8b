package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// latencyTurn is one turn of test/browser/latency.html.
type latencyTurn struct {
	Transport string   `json:"transport"`
	Mode      string   `json:"mode"`
	Status    string   `json:"status"`
	LatencyMs *float64 `json:"latencyMs"`
	// CommitAckMs (manual turns): commit sent → input_audio_buffer.committed received.
	CommitAckMs *float64 `json:"commitAckMs"`
	Error       string   `json:"error"`
}

// TestBrowserLatencyWebRTCvsWebSocket measures latency as heard in Chromium, WebRTC against
// WebSocket in one run against one bin/omniserve: the page (test/browser/latency.html) plays
// goforward.raw from its own AudioContext into a WebRTC call (the guide's flow, ek_ key) and
// into a WebSocket session (input_audio_buffer.append, paced by the audio clock), alternating
// turns, and meters what it plays of each reply on the same clock. Server VAD turns measure
// speech end → first audible 10 ms window of the reply; manual turns commit sent → the same.
// The test asserts that every turn was heard on both transports; the figures are logged and
// written to the artifact directory (docs/BENCHMARKS.md records them).
func TestBrowserLatencyWebRTCvsWebSocket(t *testing.T) {
	// Turns per transport and mode: the page's default, 5, or OMNISERVE_BROWSER_TURNS for a
	// firmer p50 when measuring (the run's time grows by about 11 s per turn).
	perMode := 5
	if v := os.Getenv("OMNISERVE_BROWSER_TURNS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "OMNISERVE_BROWSER_TURNS")
		require.Positive(t, n, "OMNISERVE_BROWSER_TURNS")
		perMode = n
	}
	// The page's origin (another loopback port) opens the realtime WebSocket too.
	srv, raw := runWebRTCPageEnv(t, fmt.Sprintf("latency.html?n=%d", perMode), `{"session":{"type":"realtime","instructions":"Answer in one word.","max_output_tokens":8}}`,
		map[string]string{"/speech/": "/usr/share/pocketsphinx/test/data"}, []string{"OMNISERVE_ORIGIN_PATTERNS=127.0.0.1:*"})
	var got struct {
		OK              bool                      `json:"ok"`
		Error           string                    `json:"error"`
		Steps           []string                  `json:"steps"`
		Turns           []latencyTurn             `json:"turns"`
		Events          map[string]map[string]int `json:"events"`
		Errors          []any                     `json:"errors"`
		HangupStatus    int                       `json:"hangupStatus"`
		SpeechEndInClip float64                   `json:"speechEndInClipMs"`
		BaseLatencyMs   float64                   `json:"baseLatencyMs"`
		OutputLatencyMs float64                   `json:"outputLatencyMs"`
		SampleRate      float64                   `json:"sampleRate"`
		Inbound         *struct {
			PacketsReceived          int     `json:"packetsReceived"`
			PacketsLost              int     `json:"packetsLost"`
			JitterBufferDelay        float64 `json:"jitterBufferDelay"`
			JitterBufferEmittedCount float64 `json:"jitterBufferEmittedCount"`
			JitterBufferTargetDelay  float64 `json:"jitterBufferTargetDelay"`
			JitterBufferMinimumDelay float64 `json:"jitterBufferMinimumDelay"`
			// What NetEq did to the reply's audio besides playing it: stretched it to build
			// its delay (deceleration), squeezed it to shed delay (acceleration), concealed.
			TotalSamplesReceived   float64 `json:"totalSamplesReceived"`
			ConcealedSamples       float64 `json:"concealedSamples"`
			SilentConcealedSamples float64 `json:"silentConcealedSamples"`
			InsertedForDecel       float64 `json:"insertedSamplesForDeceleration"`
			RemovedForAccel        float64 `json:"removedSamplesForAcceleration"`
		} `json:"inbound"`
	}
	require.NoError(t, json.Unmarshal(raw, &got), string(raw))
	require.NoError(t, os.WriteFile(filepath.Join(t.ArtifactDir(), "browser-latency.json"), raw, 0o644))
	require.True(t, got.OK, "page failed: %s\nsteps: %v\nevents: %v\nserver:\n%s", got.Error, got.Steps, got.Events, srv.logs.String())
	require.Empty(t, got.Errors)
	require.Equal(t, 200, got.HangupStatus)

	lat := map[string][]float64{}
	for _, tr := range got.Turns {
		require.Empty(t, tr.Error, "%s %s", tr.Transport, tr.Mode)
		require.Contains(t, []string{"completed", "incomplete"}, tr.Status, "%s %s", tr.Transport, tr.Mode)
		require.NotNil(t, tr.LatencyMs, "%s %s turn was not heard", tr.Transport, tr.Mode)
		require.Positive(t, *tr.LatencyMs, "%s %s: heard before its reference", tr.Transport, tr.Mode)
		k := tr.Mode + "/" + tr.Transport
		lat[k] = append(lat[k], *tr.LatencyMs)
		if tr.CommitAckMs != nil {
			lat["ack/"+tr.Transport] = append(lat["ack/"+tr.Transport], *tr.CommitAckMs)
		}
	}
	for _, k := range []string{"server_vad/webrtc", "server_vad/websocket", "manual/webrtc", "manual/websocket"} {
		require.Len(t, lat[k], perMode, k)
	}
	table := browserLatencyTable(lat)
	if in := got.Inbound; in != nil && in.JitterBufferEmittedCount > 0 {
		table += fmt.Sprintf("WebRTC jitter buffer: mean delay %.1f ms (jitterBufferDelay/jitterBufferEmittedCount), target %.1f ms; packets %d, lost %d\n",
			1000*in.JitterBufferDelay/in.JitterBufferEmittedCount, 1000*in.JitterBufferTargetDelay/in.JitterBufferEmittedCount, in.PacketsReceived, in.PacketsLost)
		// At 48 kHz: samples / 48 = ms.
		table += fmt.Sprintf("WebRTC playout: %.0f ms played out (concealment included); stretched +%.0f ms (deceleration), squeezed −%.0f ms (acceleration), concealed %.0f ms (%.0f ms of it silent)\n",
			in.TotalSamplesReceived/48, in.InsertedForDecel/48, in.RemovedForAccel/48, in.ConcealedSamples/48, in.SilentConcealedSamples/48)
	}
	table += fmt.Sprintf("AudioContext %.0f Hz: baseLatency %.1f ms, outputLatency %.1f ms (both transports alike); speech ends %.0f ms into the clip\n",
		got.SampleRate, got.BaseLatencyMs, got.OutputLatencyMs, got.SpeechEndInClip)
	t.Logf("latency as heard in Chromium (ms, render clock of the page's AudioContext):\n%s", table)
	require.NoError(t, os.WriteFile(filepath.Join(t.ArtifactDir(), "browser-latency.txt"), []byte(table), 0o644))
}

// browserLatencyTable prints p50/p90 per mode and transport, and WebRTC − WebSocket at p50.
func browserLatencyTable(lat map[string][]float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s %9s %9s %9s %9s %12s\n", "measure", "ws p50", "ws p90", "rtc p50", "rtc p90", "rtc−ws p50")
	for _, m := range []struct{ mode, name string }{
		{"server_vad", "speech end → audible"},
		{"manual", "commit → audible"},
		{"ack", "commit → committed event"},
	} {
		if len(lat[m.mode+"/websocket"])+len(lat[m.mode+"/webrtc"]) == 0 {
			continue
		}
		ws, rtc := lat[m.mode+"/websocket"], lat[m.mode+"/webrtc"]
		fmt.Fprintf(&b, "%-28s %9.1f %9.1f %9.1f %9.1f %+12.1f\n", m.name,
			percentile(ws, 50), percentile(ws, 90), percentile(rtc, 50), percentile(rtc, 90), percentile(rtc, 50)-percentile(ws, 50))
	}
	return b.String()
}

// percentile is the nearest-rank percentile of xs.
func percentile(xs []float64, p float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}
