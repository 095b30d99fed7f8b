package test

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/opus"
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

	pc, err := webrtc.NewPeerConnection(webrtc.Configuration{})
	require.NoError(t, err)
	defer pc.Close()
	mic, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "mic", "page")
	require.NoError(t, err)
	_, err = pc.AddTrack(mic)
	require.NoError(t, err)
	dc, err := pc.CreateDataChannel("oai-events", nil)
	require.NoError(t, err)
	events := make(chan map[string]any, 8192)
	dcClosed := make(chan struct{})
	dc.OnClose(func() { close(dcClosed) })
	dc.OnMessage(func(m webrtc.DataChannelMessage) {
		var ev map[string]any
		if json.Unmarshal(m.Data, &ev) == nil {
			select {
			case events <- ev:
			default:
			}
		}
	})
	var packets, firstPacketAt atomic.Int64
	var codec atomic.Value
	var readers sync.WaitGroup
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		codec.Store(tr.Codec().MimeType)
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				if _, _, err := tr.ReadRTP(); err != nil {
					return
				}
				if packets.Add(1) == 1 {
					firstPacketAt.Store(time.Now().UnixNano())
				}
			}
		}()
	})
	offer, err := pc.CreateOffer(nil)
	require.NoError(t, err)
	require.NoError(t, pc.SetLocalDescription(offer))
	resp, answer := postWith(t, base+"/v1/realtime/calls", secret.Value, "application/sdp", offer.SDP)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(answer))
	loc := resp.Header.Get("Location")
	require.Regexp(t, `^/v1/realtime/calls/rtc_[0-9a-f]+$`, loc)
	require.NoError(t, pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: string(answer)}))

	var seen []string
	until := func(typ string, d time.Duration) map[string]any {
		t.Helper()
		deadline := time.After(d)
		for {
			select {
			case ev := <-events:
				seen = append(seen, ev["type"].(string))
				if ev["type"] == typ {
					return ev
				}
			case <-deadline:
				t.Fatalf("no %s within %v; last events %v\n%s", typ, d, seen[max(0, len(seen)-20):], srv.logs.String())
			}
		}
	}
	created := until("session.created", 30*time.Second)
	require.Equal(t, "Answer in one word.", created["session"].(map[string]any)["instructions"], "the minted session")

	raw, err := os.ReadFile("/usr/share/pocketsphinx/test/data/goforward.raw")
	require.NoError(t, err, "install pocketsphinx-testdata")
	pcm := make([]int16, len(raw)/2, len(raw)/2+16000*2)
	for i := range pcm {
		pcm[i] = int16(binary.LittleEndian.Uint16(raw[2*i:]))
	}
	pcm = append(pcm, make([]int16, 16000*2)...) // 2 s of silence ends the turn
	enc, err := opus.NewEncoder(16000, 32000)
	require.NoError(t, err)
	defer enc.Close()
	micDone := make(chan struct{})
	go func() { // the microphone: 20 ms frames in real time
		defer close(micDone)
		pkt := make([]byte, 1500)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i+320 <= len(pcm); i += 320 {
			<-tick.C
			n, err := enc.Encode(pcm[i:i+320], pkt)
			if err != nil {
				return
			}
			if mic.WriteSample(media.Sample{Data: append([]byte(nil), pkt[:n]...), Duration: 20 * time.Millisecond}) != nil {
				return
			}
		}
	}()
	until("input_audio_buffer.committed", 90*time.Second)
	committedAt := time.Now()
	tr := until("conversation.item.input_audio_transcription.completed", 90*time.Second)
	require.Contains(t, strings.ToLower(tr["transcript"].(string)), "forward")
	until("output_audio_buffer.started", 90*time.Second)
	until("response.done", 90*time.Second)
	until("output_audio_buffer.stopped", 90*time.Second)
	require.NotContains(t, seen, "response.output_audio.delta")
	require.Greater(t, packets.Load(), int64(5), "the answer's audio arrives as RTP")
	require.Equal(t, "audio/opus", strings.ToLower(codec.Load().(string)))
	t.Logf("answer audio: %d RTP packets; first packet %v after input_audio_buffer.committed arrived",
		packets.Load(), time.Unix(0, firstPacketAt.Load()).Sub(committedAt).Round(time.Millisecond))
	<-micDone

	resp, body = postWith(t, base+loc+"/hangup", "sk", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	select {
	case <-dcClosed:
	case <-time.After(15 * time.Second):
		t.Fatal("the data channel stayed open after hangup")
	}
	require.Eventually(t, func() bool {
		r, _ := postWith(t, base+loc+"/hangup", "sk", "", "")
		return r.StatusCode == http.StatusNotFound
	}, 10*time.Second, 50*time.Millisecond, "the call is gone")
	require.NoError(t, pc.Close())
	readers.Wait()
}
