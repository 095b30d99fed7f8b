package test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/rtcclient"
)

func postWith(t *testing.T, url, key, ctype, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	client := http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// TestWebRTCCall drives bin/omniserve the way OpenAI's WebRTC guide does, with a pion peer in
// place of the browser: the backend mints an ek_ key, the "page" POSTs its SDP offer with it to
// /v1/realtime/calls, speaks "go forward ten meters" as Opus RTP, and gets session.created on
// oai-events, the user's transcript, the answer's audio as Opus RTP (no audio deltas on the
// channel), and hangup ends the call.
func TestWebRTCCall(t *testing.T) {
	srv := startBinary(t, "--api-key", "sk")
	base := "http://" + srv.addr

	resp, body := postWith(t, base+"/v1/realtime/client_secrets", "sk", "application/json",
		`{"expires_after":{"anchor":"created_at","seconds":60},"session":{"type":"realtime","instructions":"Answer in one word.","max_output_tokens":6}}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var secret struct {
		Value     string `json:"value"`
		ExpiresAt int64  `json:"expires_at"`
	}
	require.NoError(t, json.Unmarshal(body, &secret))
	require.True(t, strings.HasPrefix(secret.Value, "ek_"))

	// Bad input first: each a 4xx in OpenAI's shape.
	for _, bad := range []struct {
		name, url, key, ctype, body string
		want                        int
	}{
		{"wrong key", base + "/v1/realtime/calls", "ek_wrong", "application/sdp", "v=0", 401},
		{"malformed SDP", base + "/v1/realtime/calls", secret.Value, "application/sdp", "not sdp", 400},
		{"ek_ may not list models", base + "/v1/models", secret.Value, "", "", 0},
		{"unknown call", base + "/v1/realtime/calls/rtc_nope/hangup", "sk", "", "", 404},
	} {
		if bad.want == 0 {
			req, _ := http.NewRequest(http.MethodGet, bad.url, nil)
			req.Header.Set("Authorization", "Bearer "+bad.key)
			r, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			r.Body.Close()
			require.Equal(t, http.StatusUnauthorized, r.StatusCode, bad.name)
			continue
		}
		r, b := postWith(t, bad.url, bad.key, bad.ctype, bad.body)
		require.Equal(t, bad.want, r.StatusCode, "%s: %s", bad.name, b)
		var e struct {
			Error struct{ Message, Type string }
		}
		require.NoError(t, json.Unmarshal(b, &e), bad.name)
		require.NotEmpty(t, e.Error.Message, bad.name)
	}

	ctx := context.Background()
	c, err := rtcclient.Dial(ctx, rtcclient.Config{BaseURL: base, Key: secret.Value, MicRate: 16000})
	require.NoError(t, err)
	defer c.Close()
	require.Regexp(t, `^/v1/realtime/calls/rtc_[0-9a-f]+$`, c.Location())
	until := func(typ string, d time.Duration) rtcclient.Event {
		t.Helper()
		ev, err := c.WaitFor(ctx, typ, d)
		require.NoError(t, err, srv.logs.String())
		return ev
	}
	created := until("session.created", 30*time.Second)
	require.Equal(t, "Answer in one word.", created.M["session"].(map[string]any)["instructions"], "the minted session")

	raw, err := os.ReadFile("/usr/share/pocketsphinx/test/data/goforward.raw")
	require.NoError(t, err, "install pocketsphinx-testdata")
	pcm := make([]int16, len(raw)/2, len(raw)/2+16000*2)
	for i := range pcm {
		pcm[i] = int16(binary.LittleEndian.Uint16(raw[2*i:]))
	}
	pcm = append(pcm, make([]int16, 16000*2)...) // 2 s of silence ends the turn
	micDone := c.StartSpeaking(pcm, time.Time{}) // the microphone: 20 ms frames in real time
	committed := until("input_audio_buffer.committed", 90*time.Second)
	tr := until("conversation.item.input_audio_transcription.completed", 90*time.Second)
	require.Contains(t, strings.ToLower(tr.M["transcript"].(string)), "forward")
	until("output_audio_buffer.started", 90*time.Second)
	until("response.done", 90*time.Second)
	until("output_audio_buffer.stopped", 90*time.Second)
	require.NotContains(t, c.Seen(), "response.output_audio.delta")
	st := c.Stats()
	require.Greater(t, st.Packets, int64(5), "the answer's audio arrives as RTP")
	require.Equal(t, "audio/opus", st.Codec)
	audible := c.FirstAudibleAfter(committed.At)
	require.False(t, audible.IsZero(), "the answer is audible")
	t.Logf("answer audio: %d RTP packets; first packet %v, first audible sample %v after input_audio_buffer.committed arrived",
		st.Packets, st.FirstPacket.Sub(committed.At).Round(time.Millisecond), audible.Sub(committed.At).Round(time.Millisecond))
	require.NoError(t, <-micDone)

	// The call's RTP figures in Prometheus, while it is up and after it ended.
	metric := func(body, series string) float64 {
		t.Helper()
		for _, l := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(l, series+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				require.NoError(t, err, l)
				return f
			}
		}
		t.Fatalf("no %s in /metrics", series)
		return 0
	}
	scrape := func() string {
		r, err := http.Get(base + "/metrics")
		require.NoError(t, err)
		defer r.Body.Close()
		b, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		return string(b)
	}
	live := scrape()
	received := metric(live, `omniserve_webrtc_rtp_packets_total{direction="received"}`)
	sent := metric(live, `omniserve_webrtc_rtp_packets_total{direction="sent"}`)
	require.Greater(t, received, 100.0, "the microphone's packets")
	require.GreaterOrEqual(t, sent, float64(st.Packets), "the reply's packets, as many as the client got")
	require.Zero(t, metric(live, "omniserve_webrtc_calls_ended_total"))
	t.Logf("/metrics during the call: %v packets received, %v sent", received, sent)

	require.NoError(t, c.Hangup(ctx, "sk"))
	select {
	case <-c.ChannelClosed():
	case <-time.After(15 * time.Second):
		t.Fatal("the data channel stayed open after hangup")
	}
	loc := c.Location()
	require.Eventually(t, func() bool {
		r, _ := postWith(t, base+loc+"/hangup", "sk", "", "")
		return r.StatusCode == http.StatusNotFound
	}, 10*time.Second, 50*time.Millisecond, "the call is gone")
	ended := scrape()
	require.Equal(t, 1.0, metric(ended, "omniserve_webrtc_calls_ended_total"))
	require.GreaterOrEqual(t, metric(ended, `omniserve_webrtc_rtp_packets_total{direction="sent"}`), sent, "counters keep the ended call's packets")
	require.GreaterOrEqual(t, metric(ended, `omniserve_webrtc_rtp_packets_total{direction="received"}`), received)
	require.Equal(t, 1.0, metric(ended, `omniserve_webrtc_call_jitter_seconds_count{direction="received"}`), "the call's jitter, observed as it ended")
	require.Equal(t, 1.0, metric(ended, "omniserve_webrtc_call_rtt_seconds_count"), "its round trip, from the client's receiver reports")
	require.Equal(t, 1.0, metric(ended, `omniserve_webrtc_call_packet_loss_ratio_count{direction="sent"}`))
	require.NoError(t, c.Close())
}
