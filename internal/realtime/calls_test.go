package realtime_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/clientsecret"
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/rtcclient"
	"github.com/omniserve/omniserve/internal/session"
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
		realtime.HandlerConfig{}, realtime.CallsConfig{}, getFixture(t).backend, nil)
}

// newCallsServerWith is newCallsServer with the manager's, handler's and transport's
// configuration (the API key "sk" and a client-secret store are set on hcfg; a zero
// ConnectTimeout is 20 s), a backend and a logger.
func newCallsServerWith(t *testing.T, mcfg session.ManagerConfig, hcfg realtime.HandlerConfig, ccfg realtime.CallsConfig, backend session.Backend, log *zap.Logger) *callsServer {
	t.Helper()
	m := session.NewManager(mcfg, backend, zap.NewNop())
	secrets := clientsecret.NewStore(16, time.Now)
	hcfg.APIKey, hcfg.Secrets = "sk", secrets
	if ccfg.ConnectTimeout == 0 {
		ccfg.ConnectTimeout = 20 * time.Second
	}
	calls, err := realtime.NewCalls(ccfg, hcfg, m, log)
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

// audioOffer is a real offer from a peer with an audio transceiver (sendrecv) and the data
// channel, for tests that read the answer rather than make the call.
func audioOffer(t *testing.T) string {
	t.Helper()
	pc, err := webrtc.NewPeerConnection(webrtc.Configuration{})
	require.NoError(t, err)
	defer pc.Close()
	_, err = pc.AddTransceiverFromKind(webrtc.RTPCodecTypeAudio, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendrecv})
	require.NoError(t, err)
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

// TestCallsFullServerAnswersFirst: with every slot held, an offer is answered 503 before any
// work on it (a malformed one too), and the slot it did not get is not taken.
func TestCallsFullServerAnswersFirst(t *testing.T) {
	t.Parallel()
	s := newCallsServerWith(t, session.ManagerConfig{MaxSessions: 1, ModelName: "dummy"},
		realtime.HandlerConfig{}, realtime.CallsConfig{}, getFixture(t).backend, nil)
	slot, err := s.m.Acquire(context.Background())
	require.NoError(t, err)
	defer slot.Release()
	for _, body := range []string{"hello", dataOnlyOffer(t)} {
		resp, out := post(t, s.url, "application/sdp", body)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(out))
		require.Contains(t, string(out), "resource_exhausted")
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
	}
	require.Equal(t, 1, s.m.Active())
	require.Zero(t, s.calls.Active())
}

// TestCallSpeech: a pion peer sends "go forward ten meters" as Opus RTP; the call answers with
// 201 + Location, session.created on oai-events, the user's transcript, the response's audio as
// Opus RTP (never as deltas on the channel), output_audio_buffer.started/stopped, and hangup
// ends it.
func TestCallSpeech(t *testing.T) {
	t.Parallel()
	s := newCallsServer(t)
	voice := goForward(t) // 24 kHz PCM16

	c := dialCall(t, s, rtcclient.Config{Key: "sk", MicRate: 24000})
	require.True(t, strings.HasPrefix(c.Location(), "/v1/realtime/calls/rtc_"), c.Location())
	until := func(typ string, d time.Duration) rtcclient.Event {
		t.Helper()
		ev, err := c.WaitFor(context.Background(), typ, d)
		require.NoError(t, err)
		return ev
	}
	until("session.created", 20*time.Second)
	// A short answer: the dummy model talks until its token budget ends.
	require.NoError(t, c.UpdateSession(map[string]any{"type": "realtime", "max_output_tokens": 6}))
	until("session.updated", 10*time.Second)

	// The microphone: 20 ms Opus frames in real time, then a second and a half of silence.
	pcm := make([]int16, len(voice)/2)
	for i := range pcm {
		pcm[i] = int16(binary.LittleEndian.Uint16(voice[2*i:]))
	}
	pcm = append(pcm, make([]int16, 24000*1500/1000)...)
	c.StartSpeaking(pcm, time.Time{})
	tr := until("conversation.item.input_audio_transcription.completed", 60*time.Second)
	require.Contains(t, strings.ToLower(tr.M["transcript"].(string)), "forward")
	until("output_audio_buffer.started", 60*time.Second)
	until("response.done", 60*time.Second)
	until("output_audio_buffer.stopped", 60*time.Second)
	require.NotContains(t, c.Seen(), "response.output_audio.delta")
	require.Contains(t, c.Seen(), "response.output_audio.done")
	st := c.Stats()
	require.Equal(t, "audio/opus", st.Codec)
	require.Greater(t, st.Packets, int64(10), "the response's audio arrives as RTP")
	require.False(t, st.FirstAudible.IsZero(), "and is audible")
	t.Logf("response audio: %d RTP packets, %d bytes of Opus", st.Packets, st.Bytes)

	// The server's RTP figures: the microphone's packets in, the reply's out, as the client
	// counted them; the round trip from the client's receiver reports.
	rtp := s.calls.RTPStats()
	require.Len(t, rtp, 1)
	require.Equal(t, c.CallID(), rtp[0].CallID)
	require.Greater(t, rtp[0].PacketsReceived, uint64(100), "the microphone: %+v", rtp[0])
	require.GreaterOrEqual(t, rtp[0].PacketsSent, uint64(st.Packets), "every packet the client got was sent: %+v", rtp[0])
	require.Positive(t, rtp[0].BytesSent)
	require.Less(t, rtp[0].JitterIn, 0.5, "seconds")
	// Sender reports go out every second; the client's next receiver report answers one.
	require.Eventually(t, func() bool { rtp = s.calls.RTPStats(); return rtp[0].RTTMeasured }, 5*time.Second, 50*time.Millisecond,
		"the round trip is measured from the client's receiver reports")
	require.Less(t, rtp[0].RTT, 0.5, "seconds, on loopback")
	// And the other way: the server reads the client's sender reports, so its receiver reports
	// let the client (a browser's getStats) measure the round trip too.
	require.Eventually(t, func() bool { return c.Stats().MicRTTMeasured }, 5*time.Second, 50*time.Millisecond,
		"the client measures the round trip from the server's receiver reports")
	require.Less(t, c.Stats().MicRTT, 500*time.Millisecond)
	t.Logf("server RTP: %+v", rtp[0])

	require.NoError(t, c.Hangup(context.Background(), "sk"))
	require.Eventually(t, func() bool { return s.calls.Active() == 0 && s.m.Active() == 0 }, 10*time.Second, 20*time.Millisecond)
	ended := s.calls.EndedRTP()
	require.Equal(t, 1, ended.Calls)
	require.GreaterOrEqual(t, ended.PacketsSent, rtp[0].PacketsSent, "the ended call's totals are kept")
	require.GreaterOrEqual(t, ended.PacketsReceived, rtp[0].PacketsReceived)
}

// A browser may stop sending packets in a pause (Opus DTX, or a source it finds silent): the
// user's turn still ends, because the call appends the time without packets as silence. The
// client here sends the speech and then nothing at all.
func TestCallPauseWithoutPackets(t *testing.T) {
	t.Parallel()
	s := newCallsServer(t)
	voice := goForward(t) // 24 kHz PCM16
	c := dialCall(t, s, rtcclient.Config{Key: "sk", MicRate: 24000})
	_, err := c.WaitFor(context.Background(), "session.created", 20*time.Second)
	require.NoError(t, err)
	require.NoError(t, c.UpdateSession(map[string]any{"type": "realtime", "max_output_tokens": 6}))
	_, err = c.WaitFor(context.Background(), "session.updated", 10*time.Second)
	require.NoError(t, err)

	pcm := make([]int16, len(voice)/2)
	for i := range pcm {
		pcm[i] = int16(binary.LittleEndian.Uint16(voice[2*i:]))
	}
	pcm = pcm[:24000*2400/1000] // the clip's own trailing silence cut: its speech ends at 2360 ms
	require.NoError(t, <-c.StartSpeaking(pcm, time.Time{}))
	spoke := time.Now()
	_, err = c.WaitFor(context.Background(), "input_audio_buffer.speech_stopped", 10*time.Second)
	require.NoError(t, err, "no packet after the speech: the pause must still end the turn")
	t.Logf("speech_stopped %v after the last packet", time.Since(spoke).Round(time.Millisecond))
	tr, err := c.WaitFor(context.Background(), "conversation.item.input_audio_transcription.completed", 30*time.Second)
	require.NoError(t, err)
	// The words, not their exact recognition: a sender stalled over 100 ms mid-speech (the race
	// detector on a loaded machine) reads as a pause, whose silence splits a word ("for our
	// words ten meters" was seen once).
	text := strings.ToLower(tr.M["transcript"].(string))
	require.True(t, strings.Contains(text, "forward") || strings.Contains(text, "meters"), "transcript %q", text)
}

// dialCall makes a call on s with rtcclient (cfg's BaseURL is s's); the test's cleanup closes it.
func dialCall(t *testing.T, s *callsServer, cfg rtcclient.Config) *rtcclient.Client {
	t.Helper()
	cfg.BaseURL = strings.TrimSuffix(s.url, "/v1/realtime/calls")
	c, err := rtcclient.Dial(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestCallBargeIn: the browser SDK's interrupt (response.cancel, output_audio_buffer.clear) cuts
// the audio (output_audio_buffer.cleared) and the server truncates the assistant item to what it
// had played; the multipart form's session applies.
func TestCallBargeIn(t *testing.T) {
	t.Parallel()
	s := newCallsServer(t)
	c := dialCall(t, s, rtcclient.Config{Key: "sk",
		Session: json.RawMessage(`{"type":"realtime","instructions":"Talk at length.","audio":{"input":{"turn_detection":null}}}`)})
	until := func(typ string, d time.Duration) rtcclient.Event {
		t.Helper()
		ev, err := c.WaitFor(context.Background(), typ, d)
		require.NoError(t, err)
		return ev
	}
	created := until("session.created", 20*time.Second)
	require.Equal(t, "Talk at length.", created.M["session"].(map[string]any)["instructions"])
	require.NoError(t, c.Send(&protocol.ConversationItemCreate{Header: protocol.Header{Kind: "conversation.item.create"}, Role: "user", Text: "Tell me a long story."}))
	require.NoError(t, c.Send(&protocol.ResponseCreate{Header: protocol.Header{Kind: "response.create"}}))
	started := until("output_audio_buffer.started", 60*time.Second)
	time.Sleep(300 * time.Millisecond) // some audio is played
	require.NoError(t, c.Send(&protocol.ResponseCancel{Header: protocol.Header{Kind: "response.cancel"}}))
	require.NoError(t, c.Send(&protocol.OutputAudioBufferClear{Header: protocol.Header{Kind: "output_audio_buffer.clear"}}))
	cleared := until("output_audio_buffer.cleared", 10*time.Second)
	require.Equal(t, started.ResponseID(), cleared.ResponseID())
	typed, err := until("conversation.item.truncated", 10*time.Second).Typed()
	require.NoError(t, err)
	tr, ok := typed.(protocol.ConversationItemTruncated)
	require.True(t, ok, "%T", typed)
	played := float64(tr.AudioEndMs)
	require.Greater(t, played, 100.0, "about 300 ms were played")
	require.Less(t, played, 2000.0, "truncated to what was played, not what was generated")
	t.Logf("truncated at %v ms", played)
	require.NoError(t, c.Close())
	require.Eventually(t, func() bool { return s.calls.Active() == 0 && s.m.Active() == 0 }, 30*time.Second, 20*time.Millisecond)
}

// newBareCalls serves the calls endpoint alone with cfg (the API key "sk") on its own session
// manager, both closed when the test ends.
func newBareCalls(t *testing.T, cfg realtime.CallsConfig) (*session.Manager, *httptest.Server) {
	t.Helper()
	m := session.NewManager(session.ManagerConfig{ModelName: "dummy"}, getFixture(t).backend, zap.NewNop())
	calls, err := realtime.NewCalls(cfg, realtime.HandlerConfig{APIKey: "sk"}, m, nil)
	require.NoError(t, err)
	srv := httptest.NewServer(calls)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, calls.Close(ctx))
		require.NoError(t, m.Shutdown(ctx))
		srv.Close()
	})
	return m, srv
}

// TestCallsPublicIPs: behind a static NAT the answer's host candidates carry the configured
// public address, not the host's own.
func TestCallsPublicIPs(t *testing.T) {
	t.Parallel()
	_, srv := newBareCalls(t, realtime.CallsConfig{PublicIPs: []string{"203.0.113.7"}, ConnectTimeout: 5 * time.Second})
	resp, body := post(t, srv.URL+"/v1/realtime/calls", "application/sdp", audioOffer(t))
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

// TestCallNeverConnectedFreesSlot: an offer answered but never connected (the peer never
// applies the answer) holds its admission slot only until the default connect timeout, 10 s.
func TestCallNeverConnectedFreesSlot(t *testing.T) {
	t.Parallel()
	m, srv := newBareCalls(t, realtime.CallsConfig{})
	start := time.Now()
	resp, body := post(t, srv.URL+"/v1/realtime/calls", "application/sdp", audioOffer(t))
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
	require.Equal(t, 1, m.Active(), "the call holds a slot")
	require.Eventually(t, func() bool { return m.Active() == 0 }, 15*time.Second, 50*time.Millisecond, "the slot is freed")
	took := time.Since(start)
	t.Logf("slot freed %s after the offer", took.Round(time.Millisecond))
	require.Greater(t, took, 9*time.Second, "not before the connect timeout")
}

// TestCallCommitTakesAllAudio: the microphone's audio reaches the session in 100 ms pieces; a
// commit from the data channel (push-to-talk's release) takes every sample received before it,
// the unfinished piece included, not only the whole pieces.
func TestCallCommitTakesAllAudio(t *testing.T) {
	t.Parallel()
	s := newCallsServer(t)
	c := dialCall(t, s, rtcclient.Config{Key: "sk", MicRate: 24000,
		Session: json.RawMessage(`{"type":"realtime","audio":{"input":{"turn_detection":null,"transcription":{"model":"whisper-1"}}}}`)})
	_, err := c.WaitFor(context.Background(), "session.created", 20*time.Second)
	require.NoError(t, err)
	voice := goForward(t)
	pcm := make([]int16, 24000*1080/1000) // 1.08 s: 54 frames of 20 ms, ten 100 ms pieces and 80 ms
	for i := range pcm {
		pcm[i] = int16(binary.LittleEndian.Uint16(voice[2*(i%(len(voice)/2)):]))
	}
	require.NoError(t, c.Speak(context.Background(), pcm, time.Time{}))
	time.Sleep(300 * time.Millisecond) // every packet has arrived and been decoded
	require.NoError(t, c.SendJSON([]byte(`{"type":"input_audio_buffer.commit"}`)))
	done, err := c.WaitFor(context.Background(), "conversation.item.input_audio_transcription.completed", 60*time.Second)
	require.NoError(t, err)
	secs := done.M["usage"].(map[string]any)["seconds"].(float64)
	t.Logf("committed audio: %.3f s of 1.080 s spoken", secs)
	require.InDelta(t, 1.08, secs, 0.025, "the commit took the last, unfinished 100 ms piece too")
}
