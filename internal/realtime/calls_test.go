package realtime_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/clientsecret"
	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
	"github.com/omniserve/omniserve/internal/speech"
)

type callsServer struct {
	url     string // of POST /v1/realtime/calls
	ws      string // of GET /v1/realtime (ws://)
	m       *session.Manager
	calls   *realtime.Calls
	secrets *clientsecret.Store
}

func newCallsServer(t *testing.T) *callsServer {
	t.Helper()
	return newCallsServerWith(t, session.ManagerConfig{MaxOutputLead: 200 * time.Millisecond, ModelName: "dummy"},
		realtime.HandlerConfig{}, getFixture(t).backend, nil)
}

// newCallsServerWith is newCallsServer with the manager's and handler's configuration (the API
// key "sk" and a client-secret store are set on hcfg), a backend and a logger.
func newCallsServerWith(t *testing.T, mcfg session.ManagerConfig, hcfg realtime.HandlerConfig, backend session.Backend, log *zap.Logger) *callsServer {
	t.Helper()
	m := session.NewManager(mcfg, backend, zap.NewNop())
	secrets := clientsecret.NewStore(16, time.Now)
	hcfg.APIKey, hcfg.Secrets = "sk", secrets
	calls, err := realtime.NewCalls(realtime.CallsConfig{ConnectTimeout: 20 * time.Second}, hcfg, m, log)
	require.NoError(t, err)
	require.Positive(t, calls.Port())
	rt := calls.WithSideband(realtime.NewHandler(hcfg, m, log))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/realtime" {
			rt.ServeHTTP(w, r)
			return
		}
		calls.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, calls.Close(ctx))
		require.NoError(t, m.Shutdown(ctx))
		srv.Close()
	})
	return &callsServer{url: srv.URL + "/v1/realtime/calls", ws: "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/realtime", m: m, calls: calls, secrets: secrets}
}

func post(t *testing.T, url, ctype, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk")
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// dataOnlyOffer is a real offer from a peer with a data channel and no audio.
func dataOnlyOffer(t *testing.T) string {
	pc, err := webrtc.NewPeerConnection(webrtc.Configuration{})
	require.NoError(t, err)
	defer pc.Close()
	_, err = pc.CreateDataChannel("oai-events", nil)
	require.NoError(t, err)
	offer, err := pc.CreateOffer(nil)
	require.NoError(t, err)
	return offer.SDP
}

// TestCallsBadInput: each refusal is a 4xx in OpenAI's shape and leaves no call or session.
func TestCallsBadInput(t *testing.T) {
	t.Parallel()
	s := newCallsServer(t)
	tests := []struct {
		name, url, ctype, body string
		want                   int
		code                   string
	}{
		{"malformed SDP", s.url, "application/sdp", "hello", 400, "invalid_sdp"},
		{"no audio m-line", s.url, "application/sdp", dataOnlyOffer(t), 400, "invalid_sdp"},
		{"JSON body", s.url, "application/json", `{"sdp":"v=0"}`, 415, "unsupported_content_type"},
		{"multipart without sdp", s.url, "multipart/form-data; boundary=b", "--b\r\nContent-Disposition: form-data; name=\"session\"\r\n\r\n{}\r\n--b--\r\n", 400, "missing_required_parameter"},
		{"unknown call", s.url + "/rtc_nope/hangup", "", "", 404, "call_not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, tt.url, tt.ctype, tt.body)
			require.Equal(t, tt.want, resp.StatusCode, string(body))
			var e struct {
				Error struct{ Type, Code, Message string }
			}
			require.NoError(t, json.Unmarshal(body, &e), string(body))
			require.Equal(t, tt.code, e.Error.Code)
			require.NotEmpty(t, e.Error.Message)
			require.Empty(t, resp.Header.Get("Location"))
		})
	}
	require.Zero(t, s.calls.Active())
	require.Zero(t, s.m.Active())
}

// TestCallSpeech: a pion peer sends "go forward ten meters" as Opus RTP; the call answers with
// 201 + Location, session.created on oai-events, the user's transcript, the response's audio as
// Opus RTP (never as deltas on the channel), output_audio_buffer.started/stopped, and hangup
// ends it.
func TestCallSpeech(t *testing.T) {
	t.Parallel()
	s := newCallsServer(t)
	voice := goForward(t) // 24 kHz PCM16

	pc, err := webrtc.NewPeerConnection(webrtc.Configuration{})
	require.NoError(t, err)
	defer pc.Close()
	mic, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "mic", "test")
	require.NoError(t, err)
	_, err = pc.AddTrack(mic)
	require.NoError(t, err)
	dc, err := pc.CreateDataChannel("oai-events", nil)
	require.NoError(t, err)
	events := make(chan map[string]any, 4096)
	dc.OnMessage(func(m webrtc.DataChannelMessage) {
		var ev map[string]any
		if json.Unmarshal(m.Data, &ev) == nil {
			events <- ev
		}
	})
	var rtpPackets, rtpBytes atomic.Int64
	var readers sync.WaitGroup
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		readers.Add(1)
		go func() {
			defer readers.Done()
			require.Equal(t, "audio/opus", strings.ToLower(tr.Codec().MimeType))
			for {
				p, _, err := tr.ReadRTP()
				if err != nil {
					return
				}
				rtpPackets.Add(1)
				rtpBytes.Add(int64(len(p.Payload)))
			}
		}()
	})
	offer, err := pc.CreateOffer(nil)
	require.NoError(t, err)
	require.NoError(t, pc.SetLocalDescription(offer))
	resp, answer := post(t, s.url, "application/sdp", offer.SDP)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(answer))
	require.Equal(t, "application/sdp", resp.Header.Get("Content-Type"))
	loc := resp.Header.Get("Location")
	require.True(t, strings.HasPrefix(loc, "/v1/realtime/calls/rtc_"), loc)
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
				t.Fatalf("no %s within %v; seen (last 20) %v", typ, d, seen[max(0, len(seen)-20):])
			}
		}
	}
	until("session.created", 20*time.Second)
	// A short answer: the dummy model talks until its token budget ends.
	require.NoError(t, dc.SendText(`{"type":"session.update","session":{"type":"realtime","max_output_tokens":6}}`))
	until("session.updated", 10*time.Second)

	// The microphone: 20 ms Opus frames in real time, then a second of silence.
	enc, err := speech.NewOpusEncoder(24000, 32000)
	require.NoError(t, err)
	defer enc.Close()
	pcm := make([]int16, len(voice)/2)
	for i := range pcm {
		pcm[i] = int16(binary.LittleEndian.Uint16(voice[2*i:]))
	}
	pcm = append(pcm, make([]int16, 24000*1500/1000)...)
	pkt := make([]byte, 1500)
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i+480 <= len(pcm); i += 480 {
			<-tick.C
			n, err := enc.Encode(pcm[i:i+480], pkt)
			if err != nil {
				return
			}
			_ = mic.WriteSample(media.Sample{Data: append([]byte(nil), pkt[:n]...), Duration: 20 * time.Millisecond})
		}
	}()
	tr := until("conversation.item.input_audio_transcription.completed", 60*time.Second)
	require.Contains(t, strings.ToLower(tr["transcript"].(string)), "forward")
	until("output_audio_buffer.started", 60*time.Second)
	until("response.done", 60*time.Second)
	until("output_audio_buffer.stopped", 60*time.Second)
	require.NotContains(t, seen, "response.output_audio.delta")
	require.Contains(t, seen, "response.output_audio.done")
	require.Greater(t, rtpPackets.Load(), int64(10), "the response's audio arrives as RTP")
	t.Logf("response audio: %d RTP packets, %d bytes of Opus", rtpPackets.Load(), rtpBytes.Load())

	resp, body := post(t, strings.TrimSuffix(s.url, "/v1/realtime/calls")+loc+"/hangup", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Eventually(t, func() bool { return s.calls.Active() == 0 && s.m.Active() == 0 }, 10*time.Second, 20*time.Millisecond)
	_ = pc.Close()
	readers.Wait()
}

// TestCallBargeIn: the browser SDK's interrupt (response.cancel, output_audio_buffer.clear) cuts
// the audio (output_audio_buffer.cleared) and the server truncates the assistant item to what it
// had played; the multipart form's session applies.
func TestCallBargeIn(t *testing.T) {
	t.Parallel()
	s := newCallsServer(t)
	pc, err := webrtc.NewPeerConnection(webrtc.Configuration{})
	require.NoError(t, err)
	defer pc.Close()
	_, err = pc.AddTransceiverFromKind(webrtc.RTPCodecTypeAudio, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly})
	require.NoError(t, err)
	dc, err := pc.CreateDataChannel("oai-events", nil)
	require.NoError(t, err)
	events := make(chan map[string]any, 8192)
	dc.OnMessage(func(m webrtc.DataChannelMessage) {
		var ev map[string]any
		if json.Unmarshal(m.Data, &ev) == nil {
			events <- ev
		}
	})
	var readers sync.WaitGroup
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				if _, _, err := tr.ReadRTP(); err != nil {
					return
				}
			}
		}()
	})
	offer, err := pc.CreateOffer(nil)
	require.NoError(t, err)
	require.NoError(t, pc.SetLocalDescription(offer))
	form := "--b\r\nContent-Disposition: form-data; name=\"sdp\"\r\nContent-Type: application/sdp\r\n\r\n" + offer.SDP +
		"\r\n--b\r\nContent-Disposition: form-data; name=\"session\"\r\nContent-Type: application/json\r\n\r\n" +
		`{"type":"realtime","instructions":"Talk at length.","audio":{"input":{"turn_detection":null}}}` + "\r\n--b--\r\n"
	resp, answer := post(t, s.url, "multipart/form-data; boundary=b", form)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(answer))
	require.NoError(t, pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: string(answer)}))
	var seen []any
	until := func(typ string, d time.Duration) map[string]any {
		t.Helper()
		deadline := time.After(d)
		for {
			select {
			case ev := <-events:
				seen = append(seen, ev["type"])
				if ev["type"] == "error" {
					seen = append(seen, ev["error"])
				}
				if ev["type"] == typ {
					return ev
				}
			case <-deadline:
				t.Fatalf("no %s within %v; seen %v", typ, d, seen)
			}
		}
	}
	created := until("session.created", 20*time.Second)
	require.Equal(t, "Talk at length.", created["session"].(map[string]any)["instructions"])
	require.NoError(t, dc.SendText(`{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"Tell me a long story."}]}}`))
	require.NoError(t, dc.SendText(`{"type":"response.create"}`))
	started := until("output_audio_buffer.started", 60*time.Second)
	time.Sleep(300 * time.Millisecond) // some audio is played
	require.NoError(t, dc.SendText(`{"type":"response.cancel"}`))
	require.NoError(t, dc.SendText(`{"type":"output_audio_buffer.clear"}`))
	cleared := until("output_audio_buffer.cleared", 10*time.Second)
	require.Equal(t, started["response_id"], cleared["response_id"])
	tr := until("conversation.item.truncated", 10*time.Second)
	played := tr["audio_end_ms"].(float64)
	require.Greater(t, played, 100.0, "about 300 ms were played")
	require.Less(t, played, 2000.0, "truncated to what was played, not what was generated")
	t.Logf("truncated at %v ms", played)
	_ = pc.Close()
	require.Eventually(t, func() bool { return s.calls.Active() == 0 && s.m.Active() == 0 }, 30*time.Second, 20*time.Millisecond)
	readers.Wait()
}

// TestCallsPublicIPs: behind a static NAT the answer's host candidates carry the configured
// public address, not the host's own.
func TestCallsPublicIPs(t *testing.T) {
	t.Parallel()
	m := session.NewManager(session.ManagerConfig{ModelName: "dummy"}, getFixture(t).backend, zap.NewNop())
	calls, err := realtime.NewCalls(realtime.CallsConfig{PublicIPs: []string{"203.0.113.7"}, ConnectTimeout: 5 * time.Second},
		realtime.HandlerConfig{APIKey: "sk"}, m, nil)
	require.NoError(t, err)
	srv := httptest.NewServer(calls)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, calls.Close(ctx))
		require.NoError(t, m.Shutdown(ctx))
		srv.Close()
	})

	pc, err := webrtc.NewPeerConnection(webrtc.Configuration{})
	require.NoError(t, err)
	defer pc.Close()
	_, err = pc.AddTransceiverFromKind(webrtc.RTPCodecTypeAudio, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendrecv})
	require.NoError(t, err)
	_, err = pc.CreateDataChannel("oai-events", nil)
	require.NoError(t, err)
	offer, err := pc.CreateOffer(nil)
	require.NoError(t, err)
	resp, body := post(t, srv.URL+"/v1/realtime/calls", "application/sdp", offer.SDP)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
	var cands []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "a=candidate:") {
			cands = append(cands, strings.TrimSpace(l))
		}
	}
	require.NotEmpty(t, cands, "the answer carries its candidates")
	for _, c := range cands {
		require.Contains(t, c, " 203.0.113.7 ", "every host candidate announces the public address: %s", c)
	}
}
