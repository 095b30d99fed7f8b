package test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/rtcclient"
	"github.com/omniserve/omniserve/internal/testenv"
)

// liveRTCSession is the MediaSessionConfig the WebRTC tests start with (no audio.format: the
// codec is negotiated).
func liveRTCSession() map[string]any {
	return map[string]any{"model": "gpt-live-1", "instructions": "Be concise.",
		"audio": map[string]any{"output": map[string]any{"voice": "marin"}}}
}

// restError is the {error: {…}} body of a refused REST request.
type restError struct {
	Error struct{ Type, Code, Param, Message string }
}

// TestLiveWebRTCBadInput: what POST /v1/live/sessions and the sideband refuse, before any slot
// is taken, each with the usual {error} body naming the parameter.
func TestLiveWebRTCBadInput(t *testing.T) {
	t.Parallel()
	s := startLiveBinary(t, "--api-key", "sk-live")
	base := "http://" + s.addr
	offer := func(sess map[string]any, transport any) string {
		b, err := json.Marshal(map[string]any{"session": sess, "transport": transport})
		require.NoError(t, err)
		return string(b)
	}
	good := liveRTCSession()
	with := func(k string, v any) map[string]any {
		m := liveRTCSession()
		m[k] = v
		return m
	}
	const sdpOK = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 0\r\nc=IN IP4 0.0.0.0\r\na=rtpmap:0 PCMU/8000\r\n"
	webrtc := map[string]any{"type": "webrtc", "sdp": sdpOK}
	resp, b := postWith(t, base+"/v1/realtime/client_secrets", "sk-live", "application/json", `{"session":{"type":"realtime"}}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	var secret struct{ Value string }
	require.NoError(t, json.Unmarshal(b, &secret))
	for _, bad := range []struct {
		name, key, ctype, body string
		status                 int
		code, param            string
	}{
		{"no key", "", "application/json", offer(good, webrtc), 401, "invalid_api_key", ""},
		{"wrong key", "sk-nope", "application/json", offer(good, webrtc), 401, "invalid_api_key", ""},
		{"client secret", secret.Value, "application/json", offer(good, webrtc), 401, "invalid_api_key", ""},
		{"oversize body", "sk-live", "application/json", offer(with("instructions", strings.Repeat("x", 1<<20)), webrtc), 413, "request_too_large", ""},
		{"not JSON", "sk-live", "application/sdp", sdpOK, 415, "unsupported_content_type", "Content-Type"},
		{"unknown top-level field", "sk-live", "application/json", `{"session":{"model":"gpt-live-1"},"transport":{"type":"webrtc","sdp":"x"},"mode":1}`, 400, "unknown_parameter", "mode"},
		{"unknown session field", "sk-live", "application/json", offer(with("temprature", 0.5), webrtc), 400, "unknown_parameter", "session.temprature"},
		{"audio.format is negotiated", "sk-live", "application/json", offer(with("audio", map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 24000}}), webrtc), 400, "unknown_parameter", "session.audio.format"},
		{"missing model", "sk-live", "application/json", offer(map[string]any{"instructions": "hi"}, webrtc), 400, "missing_required_parameter", "session.model"},
		{"unknown model", "sk-live", "application/json", offer(with("model", "gpt-nope"), webrtc), 404, "model_not_found", "session.model"},
		{"client permissions", "sk-live", "application/json", offer(with("client", map[string]any{"data_channel": map[string]any{"allowed_client_events": "all"}}), webrtc), 400, "invalid_value", "session.client"},
		{"missing session", "sk-live", "application/json", `{"transport":{"type":"webrtc","sdp":"x"}}`, 400, "missing_required_parameter", "session"},
		{"missing transport", "sk-live", "application/json", `{"session":{"model":"gpt-live-1"}}`, 400, "missing_required_parameter", "transport"},
		{"missing sdp", "sk-live", "application/json", offer(good, map[string]any{"type": "webrtc"}), 400, "missing_required_parameter", "transport.sdp"},
		{"sdp not a string", "sk-live", "application/json", offer(good, map[string]any{"type": "webrtc", "sdp": 5}), 400, "invalid_type", "transport.sdp"},
		{"websocket transport", "sk-live", "application/json", offer(good, map[string]any{"type": "websocket", "sdp": sdpOK}), 400, "invalid_value", "transport.type"},
		{"invalid sdp", "sk-live", "application/json", offer(good, map[string]any{"type": "webrtc", "sdp": "not sdp"}), 400, "invalid_sdp", "transport.sdp"},
		{"no audio m-line", "sk-live", "application/json", offer(good, map[string]any{"type": "webrtc", "sdp": "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"}), 400, "invalid_sdp", "transport.sdp"},
		{"oversize sdp", "sk-live", "application/json", offer(good, map[string]any{"type": "webrtc", "sdp": sdpOK + strings.Repeat("a=x\r\n", 20000)}), 413, "request_too_large", "transport.sdp"},
	} {
		resp, b := postWith(t, base+"/v1/live/sessions", bad.key, bad.ctype, bad.body)
		require.Equal(t, bad.status, resp.StatusCode, "%s: %s", bad.name, b)
		var e restError
		require.NoError(t, json.Unmarshal(b, &e), "%s: %s", bad.name, b)
		require.Equal(t, bad.code, e.Error.Code, "%s: %s", bad.name, b)
		require.Equal(t, bad.param, e.Error.Param, "%s: %s", bad.name, b)
		require.NotEmpty(t, e.Error.Message, bad.name)
		require.NotEmpty(t, e.Error.Type, bad.name)
	}
	wsBase := "ws://" + s.addr + "/v1/live/sessions/"
	for _, bad := range []struct {
		name, path, key string
		status          int
	}{
		{"unknown session", "live_nope/attach", "sk-live", http.StatusNotFound},
		{"no key", "live_nope/attach", "", http.StatusUnauthorized},
		{"client secret", "live_nope/attach", secret.Value, http.StatusUnauthorized},
		{"unknown query parameter", "live_nope/attach?replay=1", "sk-live", http.StatusBadRequest},
		{"bad graceful_close", "live_nope/attach?graceful_close=maybe", "sk-live", http.StatusBadRequest},
	} {
		code, msg := dialRefused(t, wsBase+bad.path, bad.key)
		require.Equal(t, bad.status, code, bad.name)
		require.NotEmpty(t, msg, bad.name)
	}
}

// TestLiveWebRTC runs GPT-Live over WebRTC against the real binary: a pion peer POSTs its
// offer with a MediaSessionConfig to /v1/live/sessions and gets 201 with the answer and the
// session id; session.started arrives on oai-events; real speech sent as Opus RTP gets its input
// transcript, and the model's own reply plays as audio on the track with its output
// transcript. The app's backend attaches a sideband to the session id (?graceful_close=true):
// it gets the same events, its session.update and bad commands are answered Live's way, and
// its session.close ends the session: session.closed on both, the sideband closed 1000.
func TestLiveWebRTC(t *testing.T) {
	t.Parallel()
	raw := goForwardPCM(t)
	s := startLiveBinary(t, "--api-key", "sk-live")
	base := "http://" + s.addr
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// A history (submitted with the start, before the microphone's audio).
	cfg := liveRTCSession()
	history := make([]any, 8)
	for i := range history {
		history[i] = map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": "Hello."}}}
	}
	cfg["input"] = history
	sessCfg, err := json.Marshal(cfg)
	require.NoError(t, err)
	c, err := rtcclient.Dial(ctx, rtcclient.Config{BaseURL: base, Key: "sk-live", Live: sessCfg, MicRate: 16000})
	require.NoError(t, err, s.logs.String())
	defer c.Close()
	id := c.SessionID()
	require.Regexp(t, `^live_[0-9a-f-]+$`, id)

	dc := make(chan rtcclient.Event, 8192)
	go func() {
		defer close(dc)
		for {
			ev, err := c.Next(ctx)
			if err != nil {
				return
			}
			dc <- ev
		}
	}()
	seen := map[string][]rtcclient.Event{}
	untilDC := func(typ string, d time.Duration, cond func(rtcclient.Event) bool) rtcclient.Event {
		t.Helper()
		deadline := time.After(d)
		for {
			select {
			case ev, ok := <-dc:
				require.True(t, ok, "the data channel's events ended waiting for %s\n%s", typ, s.logs.String())
				seen[ev.Type] = append(seen[ev.Type], ev)
				require.NotEqual(t, "error", ev.Type, "%s", ev.Data)
				if ev.Type == typ && (cond == nil || cond(ev)) {
					return ev
				}
			case <-deadline:
				t.Fatalf("no %s on the data channel within %v; seen %v\n%s", typ, d, eventTypes(seen), s.logs.String())
			}
		}
	}
	started := untilDC("session.started", 30*time.Second, nil)
	snap := started.M["session"].(map[string]any)
	require.Equal(t, id, snap["id"], "the POST's id is the session's")
	require.Equal(t, "gpt-live-1", snap["model"])
	require.Equal(t, "active", snap["status"])
	require.Len(t, snap["input"], 8)

	sb := dialSideband(t, "ws://"+s.addr+"/v1/live/sessions/"+id+"/attach?graceful_close=true", "sk-live")
	sbSeen := map[string][]map[string]any{}
	untilSB := func(typ string, d time.Duration, cond func(map[string]any) bool) map[string]any {
		t.Helper()
		deadline := time.After(d)
		for {
			select {
			case ev, ok := <-sb.events:
				require.True(t, ok, "the sideband ended waiting for %s", typ)
				et, _ := ev["type"].(string)
				sbSeen[et] = append(sbSeen[et], ev)
				if et == typ && (cond == nil || cond(ev)) {
					return ev
				}
				require.NotEqual(t, "error", et, "%v", ev)
			case <-deadline:
				t.Fatalf("no %s on the sideband within %v", typ, d)
			}
		}
	}
	// The backend's commands: session.update answered on both, and Live's errors for what only a
	// WebSocket client sends.
	sb.send(t, map[string]any{"type": "session.update", "event_id": "evt_sb_update",
		"session": map[string]any{"delegation": map[string]any{"type": "client", "acknowledgement_delay_ms": 300}}})
	upd := untilSB("session.updated", 10*time.Second, nil)
	require.Equal(t, "evt_sb_update", upd["client_event_id"])
	require.EqualValues(t, 300, upd["session"].(map[string]any)["delegation"].(map[string]any)["acknowledgement_delay_ms"])
	untilDC("session.updated", 10*time.Second, nil)
	for _, bad := range []struct {
		ev          map[string]any
		code, param string
	}{
		{map[string]any{"type": "session.input_audio.append", "event_id": "evt_sb_append", "audio": "AAAA"}, "invalid_value", "type"},
		{map[string]any{"type": "session.start", "event_id": "evt_sb_start", "session": liveRTCSession()}, "session_already_started", ""},
		{map[string]any{"type": "session.update", "event_id": "evt_sb_bad", "session": map[string]any{"voice": "ash"}}, "unknown_parameter", "session.voice"},
	} {
		sb.send(t, bad.ev)
		ev := untilSB("error", 10*time.Second, nil)
		liveError(t, ev, bad.code, bad.param, bad.ev["event_id"].(string))
	}
	// The same refusal on the data channel, for the browser.
	require.NoError(t, c.SendJSON([]byte(`{"type":"session.input_audio.append","event_id":"evt_dc_append","audio":"AAAA"}`)))
	dcErr := untilDCError(t, dc, seen, 10*time.Second)
	liveError(t, dcErr.M, "invalid_value", "type", "evt_dc_append")

	// Real speech as Opus RTP, then silence: the transcript, and the model's reply on the track.
	pcm := make([]int16, len(raw)/2, len(raw)/2+16000*3)
	for i := range pcm {
		pcm[i] = int16(binary.LittleEndian.Uint16(raw[2*i:]))
	}
	pcm = append(pcm, make([]int16, 16000*3)...)
	speechEnd := time.Now().Add(time.Duration(len(raw)/2) * time.Second / 16000)
	// Context appended on the data channel is acknowledged on the timeline the RTP audio runs.
	require.NoError(t, c.SendJSON([]byte(`{"type":"session.thinking.append","event_id":"evt_think","content":"The user is testing.","delegation_id":null}`)))
	micDone := c.StartSpeaking(pcm, time.Time{})
	ack := untilDC("session.thinking.appended", 30*time.Second, nil)
	require.Equal(t, "evt_think", ack.M["client_event_id"])
	require.Greater(t, ack.M["end_ms"], ack.M["start_ms"])
	var heard strings.Builder
	untilDC("session.input_transcript.delta", 90*time.Second, func(ev rtcclient.Event) bool {
		heard.WriteString(ev.M["delta"].(string))
		return strings.Contains(strings.ToLower(heard.String()), "forward")
	})
	said := untilDC("session.output_transcript.delta", 90*time.Second, nil)
	require.NotEmpty(t, strings.TrimSpace(said.M["delta"].(string)))
	require.Contains(t, said.M, "start_ms")
	untilSB("session.input_transcript.delta", 30*time.Second, nil)
	untilSB("session.output_transcript.delta", 30*time.Second, nil)
	// The sideband's reflected audio: the microphone's and the reply's, PCM16 at 24 kHz, the
	// reply's placed on the track.
	out := untilSB("session.output_audio.delta", 30*time.Second, nil)
	require.NotEmpty(t, out["delta"])
	require.Greater(t, out["end_ms"], out["start_ms"], "%v", out)
	in := sbSeen["session.input_audio.append"]
	require.NotEmpty(t, in, "the microphone reflected")
	mic, err := base64.StdEncoding.DecodeString(in[0]["audio"].(string))
	require.NoError(t, err)
	require.Positive(t, len(mic))
	require.Zero(t, len(mic)%2, "PCM16")
	require.NoError(t, <-micDone)
	require.Eventually(t, func() bool { return !c.FirstAudibleAfter(speechEnd).IsZero() }, 30*time.Second, 50*time.Millisecond,
		"the reply is audible on the track")
	st := c.Stats()
	require.Greater(t, st.Packets, int64(5), "the reply's audio arrives as RTP")
	t.Logf("Live over WebRTC: input transcript %q; first audible sample %v after the speech ended; %d RTP packets (%s)",
		heard.String(), c.FirstAudibleAfter(speechEnd).Sub(speechEnd).Round(time.Millisecond), st.Packets, st.Codec)

	// The backend closes the session: session.closed on both, the sideband closed 1000 after it.
	sb.send(t, map[string]any{"type": "session.close", "event_id": "evt_sb_close"})
	closed := untilSB("session.closed", 30*time.Second, nil)
	require.Equal(t, "close_requested", closed["reason"])
	require.Equal(t, "evt_sb_close", closed["client_event_id"])
	require.Equal(t, id, closed["session"].(map[string]any)["id"])
	require.Positive(t, closed["usage"].(map[string]any)["seconds"], "the timeline ran with the RTP audio")
	require.Equal(t, websocket.StatusNormalClosure, sb.closeStatus(t, 15*time.Second))
	untilDC("session.closed", 30*time.Second, nil)
	select {
	case <-c.ChannelClosed():
	case <-time.After(15 * time.Second):
		t.Fatal("the data channel stayed open after session.close")
	}
	for typ := range seen {
		require.False(t, strings.HasPrefix(typ, "response.") || strings.HasPrefix(typ, "output_audio_buffer.") ||
			strings.HasPrefix(typ, "conversation.") || typ == "session.output_audio.delta" || typ == "session.created" ||
			typ == "session.input_audio.append",
			"only Live's events on oai-events (the audio is RTP): %s", typ)
	}
	for typ := range sbSeen {
		require.False(t, strings.HasPrefix(typ, "response.") || strings.HasPrefix(typ, "output_audio_buffer."), "only Live's events on the sideband: %s", typ)
	}
	code, _ := dialRefused(t, "ws://"+s.addr+"/v1/live/sessions/"+id+"/attach", "sk-live")
	require.Equal(t, http.StatusNotFound, code, "the ended session takes no sideband")
}

// untilDCError reads the data channel's events until an error event.
func untilDCError(t *testing.T, dc <-chan rtcclient.Event, seen map[string][]rtcclient.Event, d time.Duration) rtcclient.Event {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case ev, ok := <-dc:
			require.True(t, ok, "the data channel's events ended")
			seen[ev.Type] = append(seen[ev.Type], ev)
			if ev.Type == "error" {
				return ev
			}
		case <-deadline:
			t.Fatalf("no error event on the data channel within %v", d)
		}
	}
}

func eventTypes[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestLiveWebRTCOpenAINode runs the app's backend of a Live WebRTC session with the official
// Node SDK (test/openai-live/webrtc_backend.mjs): client.live.create with the browser's offer
// (the Go peer's, passed through the script as a page passes it to its server) gets the answer
// and the session id, SidebandWS attaches with graceful_close, its session.update is answered,
// it hears the user's words and the model's reply (transcripts, reflected audio) while the peer
// speaks over RTP and hears the reply on its track, and its session.close ends the session
// with session.closed and a clean close.
func TestLiveWebRTCOpenAINode(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node is not installed: skipping the GPT-Live SDK WebRTC backend (`make deps` installs it)")
	}
	raw := goForwardPCM(t)
	s := startLiveBinary(t, "--api-key", "sk-live-node")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := npmProject(ctx, t, "openai-live")
	run := exec.CommandContext(ctx, node, "webrtc_backend.mjs")
	run.Dir = dir
	run.Env = append(os.Environ(), "OPENAI_BASE_URL=http://"+s.addr+"/v1", "OPENAI_API_KEY=sk-live-node")
	stdin, err := run.StdinPipe()
	require.NoError(t, err)
	stdout, err := run.StdoutPipe()
	require.NoError(t, err)
	stderr := &syncBuf{} // read in failure messages while node still writes it
	run.Stderr = stderr
	require.NoError(t, run.Start())
	defer func() { _ = run.Process.Kill(); _ = run.Wait() }()
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	line := func(what string) []byte {
		t.Helper()
		require.True(t, lines.Scan(), "webrtc_backend.mjs printed no %s: %v\nstderr: %s\n%s", what, lines.Err(), stderr.String(), s.logs.String())
		return lines.Bytes()
	}
	var sessionID string
	signal := func(_ context.Context, offer string) (string, error) {
		b, err := json.Marshal(map[string]string{"sdp": offer})
		if err != nil {
			return "", err
		}
		if _, err := stdin.Write(append(b, '\n')); err != nil {
			return "", err
		}
		var created struct {
			SessionID string `json:"session_id"`
			SDP       string `json:"sdp"`
		}
		if err := json.Unmarshal(line("answer"), &created); err != nil {
			return "", err
		}
		sessionID = created.SessionID
		return created.SDP, nil
	}
	c, err := rtcclient.Dial(ctx, rtcclient.Config{BaseURL: "http://" + s.addr, Signal: signal, MicRate: 16000})
	require.NoError(t, err, "stderr: %s", stderr.String())
	defer c.Close()
	require.Regexp(t, `^live_`, sessionID)
	started, err := c.WaitFor(ctx, "session.started", 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, sessionID, started.M["session"].(map[string]any)["id"])
	require.JSONEq(t, `{"attached":true}`, string(line("attachment")))

	pcm := make([]int16, len(raw)/2, len(raw)/2+16000*3)
	for i := range pcm {
		pcm[i] = int16(binary.LittleEndian.Uint16(raw[2*i:]))
	}
	pcm = append(pcm, make([]int16, 16000*3)...)
	micDone := c.StartSpeaking(pcm, time.Time{})
	var got struct {
		Errors            []string       `json:"errors"`
		Events            map[string]int `json:"events"`
		InputTranscript   string         `json:"input_transcript"`
		OutputTranscript  string         `json:"output_transcript"`
		ReflectedInBytes  int            `json:"reflected_in_bytes"`
		ReflectedOutBytes int            `json:"reflected_out_bytes"`
		ReflectedOutTimed bool           `json:"reflected_out_timed"`
		Updated           *struct {
			ClientEventID string         `json:"client_event_id"`
			Delegation    map[string]any `json:"delegation"`
			EventID       string         `json:"event_id"`
		} `json:"updated"`
		Replay struct {
			Types    []string `json:"types"`
			UpdateID string   `json:"update_id"`
		} `json:"replay"`
		Closed *struct {
			Reason  string  `json:"reason"`
			ID      string  `json:"id"`
			Seconds float64 `json:"seconds"`
		} `json:"closed"`
		CloseCode int `json:"close_code"`
	}
	summary := line("summary")
	t.Logf("webrtc_backend.mjs: %s", summary)
	require.NoError(t, json.Unmarshal(summary, &got))
	require.Empty(t, got.Errors)
	require.Zero(t, got.Events["error"])
	require.NotNil(t, got.Updated)
	require.Equal(t, "evt_backend_update", got.Updated.ClientEventID)
	require.EqualValues(t, 250, got.Updated.Delegation["acknowledgement_delay_ms"])
	// The second SidebandWS got the replay: the session so far (its timeline stood at 0), the
	// backend's update under the id the first sideband got.
	require.NotEmpty(t, got.Updated.EventID)
	require.Equal(t, got.Updated.EventID, got.Replay.UpdateID, "replayed under the same event_id: %v", got.Replay.Types)
	require.Equal(t, "session.started", got.Replay.Types[0], "the replay starts with the oldest event")
	require.Contains(t, strings.ToLower(got.InputTranscript), "forward")
	require.NotEmpty(t, strings.TrimSpace(got.OutputTranscript))
	require.Positive(t, got.ReflectedInBytes, "the microphone reflected to the sideband")
	require.GreaterOrEqual(t, got.ReflectedOutBytes, 48000, "a second of the reply reflected to the sideband")
	require.True(t, got.ReflectedOutTimed, "reflected output has start_ms < end_ms")
	require.NotNil(t, got.Closed)
	require.Equal(t, "close_requested", got.Closed.Reason)
	require.Equal(t, sessionID, got.Closed.ID)
	require.Positive(t, got.Closed.Seconds)
	require.Equal(t, 1000, got.CloseCode, "graceful close after session.closed")
	require.NoError(t, <-micDone)
	require.Greater(t, c.Stats().Packets, int64(25), "the reply played on the peer's track (over 0.5 s of 20 ms packets)")
	_, err = c.WaitFor(ctx, "session.closed", 30*time.Second)
	require.NoError(t, err)
	require.NoError(t, run.Wait(), "stderr: %s", stderr.String())
}
