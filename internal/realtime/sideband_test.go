package realtime_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/webrtc/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/rtcclient"
	"github.com/omniserve/omniserve/internal/session"
)

// TestSidebandRefusals: each refusal comes before the upgrade, in OpenAI's error shape.
func TestSidebandRefusals(t *testing.T) {
	t.Parallel()
	s := newCallsServer(t)
	ek, err := s.secrets.Mint(time.Minute, json.RawMessage(`{"type":"realtime"}`))
	require.NoError(t, err)
	tests := []struct {
		name, callID, key string
		want              int
		code              string
	}{
		{"no key", "rtc_nope", "", http.StatusUnauthorized, "invalid_api_key"},
		{"wrong key", "rtc_nope", "sk-wrong", http.StatusUnauthorized, "invalid_api_key"},
		{"client secret", "rtc_nope", ek.Value, http.StatusUnauthorized, "invalid_api_key"},
		{"unknown call", "rtc_nope", "sk", http.StatusNotFound, "call_not_found"},
		{"empty call id", "", "sk", http.StatusNotFound, "call_not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.key != "" {
				h.Set("Authorization", "Bearer "+tt.key)
			}
			status, body := httpStatus(t, s.ws+"?call_id="+tt.callID, h)
			require.Equal(t, tt.want, status)
			require.Equal(t, tt.code, body.obj("error").str("code"))
			require.NotEmpty(t, body.obj("error").str("message"))
		})
	}
	require.Zero(t, s.calls.Active())
	require.Zero(t, s.m.Active())
}

// TestCallSideband: a server WebSocket joined with ?call_id= steers the call's session (its
// session.update shows on the data channel, its response.create makes RTP audio), gets the
// call's events without audio deltas, errors only its own, leaves without ending the call, and
// is closed with a close frame by the hangup.
func TestCallSideband(t *testing.T) {
	t.Parallel()
	s := newCallsServer(t)
	c := dialCall(t, s, rtcclient.Config{Key: "sk"})
	loc, callID := c.Location(), c.CallID()
	until := func(typ string, d time.Duration) rtcclient.Event {
		t.Helper()
		ev, err := c.WaitFor(context.Background(), typ, d)
		require.NoError(t, err, "on the data channel")
		return ev
	}
	until("session.created", 20*time.Second)

	auth := &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer sk"}}}
	sb := dial(t, s.ws+"?call_id="+callID, auth)
	sb.send(event{"type": "session.update", "session": event{"type": "realtime", "instructions": "Set by the sideband.", "max_output_tokens": 6,
		"tools": []any{event{"type": "function", "name": "lookup", "description": "Looks up.", "parameters": event{"type": "object", "properties": event{}}}}}})
	upd := until("session.updated", 10*time.Second)
	require.Equal(t, "Set by the sideband.", upd.M["session"].(map[string]any)["instructions"], "the sideband's update acts on the call's session")
	require.Len(t, upd.M["session"].(map[string]any)["tools"], 1)
	sb.until("session.updated", 10*time.Second)

	sb.send(event{"type": "conversation.item.create", "item": event{"type": "message", "role": "user", "content": []any{event{"type": "input_text", "text": "Say hello."}}}})
	sb.send(event{"type": "response.create"})
	until("output_audio_buffer.started", 60*time.Second)
	_, sbSeen := sb.until("response.done", 60*time.Second)
	types := map[string]bool{}
	for _, e := range sbSeen {
		types[e.str("type")] = true
	}
	require.False(t, types["response.output_audio.delta"], "no audio deltas on a call's sideband")
	require.True(t, types["response.output_audio.done"], "the sideband gets response.output_audio.done")
	require.True(t, types["output_audio_buffer.started"], "the sideband gets the call's output_audio_buffer events")
	require.True(t, types["conversation.item.added"])
	until("response.done", 30*time.Second)
	require.Eventually(t, func() bool { return c.Stats().Packets > 10 }, 10*time.Second, 20*time.Millisecond, "the sideband's response plays as RTP")

	// A bad event errors on the sideband only.
	sb.send(event{"type": "no.such.event", "event_id": "evt_bad"})
	e, _ := sb.until("error", 10*time.Second)
	require.Equal(t, "evt_bad", e.obj("error").str("event_id"))

	// Closing the sideband leaves the call up.
	require.NoError(t, sb.ws.Close(websocket.StatusNormalClosure, "done"))
	sb.close()
	require.NoError(t, c.UpdateSession(map[string]any{"type": "realtime", "instructions": "Still here."}))
	upd = until("session.updated", 10*time.Second)
	require.Equal(t, "Still here.", upd.M["session"].(map[string]any)["instructions"])
	require.Equal(t, 1, s.calls.Active())
	require.NotContains(t, c.Seen(), "error", "the sideband's bad event errs only there")
	require.NotContains(t, c.Seen(), "response.output_audio.delta")

	// The hangup closes a sideband with a close frame, after session.closed... and the call is gone.
	sb2 := dial(t, s.ws+"?call_id="+callID, auth)
	time.Sleep(100 * time.Millisecond) // joined
	resp, body := post(t, strings.TrimSuffix(s.url, "/v1/realtime/calls")+loc+"/hangup", "", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, websocket.StatusNormalClosure, sb2.closeStatus())
	require.Eventually(t, func() bool { return s.calls.Active() == 0 && s.m.Active() == 0 }, 10*time.Second, 20*time.Millisecond)
	status, eb := httpStatus(t, s.ws+"?call_id="+callID, http.Header{"Authorization": {"Bearer sk"}})
	require.Equal(t, http.StatusNotFound, status, "an ended call has no sideband")
	require.Equal(t, "call_not_found", eb.obj("error").str("code"))
}

// TestSlowSidebandLeavesTheCallUp: a sideband that stops reading is closed as a slow WebSocket
// client is (1008, logged), leaves the call, and the call's data channel goes on. Its peer is
// pion's own, not rtcclient: the data channel gets thousands of 40 KiB echoes, which this test
// filters on receipt instead of queueing them all.
func TestSlowSidebandLeavesTheCallUp(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.InfoLevel)
	s := newCallsServerWith(t, session.ManagerConfig{ModelName: "dummy", MaxInstructionsBytes: 128 << 10},
		realtime.HandlerConfig{WriteTimeout: 10 * time.Second, StallTimeout: 200 * time.Millisecond}, realtime.CallsConfig{},
		uncheckedBackend{getFixture(t).backend}, zap.New(core))
	pc, err := webrtc.NewPeerConnection(webrtc.Configuration{})
	require.NoError(t, err)
	defer pc.Close()
	_, err = pc.AddTransceiverFromKind(webrtc.RTPCodecTypeAudio, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly})
	require.NoError(t, err)
	dc, err := pc.CreateDataChannel("oai-events", nil)
	require.NoError(t, err)
	instructions := make(chan string, 1024)
	dc.OnMessage(func(m webrtc.DataChannelMessage) {
		var ev struct {
			Type    string
			Session struct{ Instructions string }
		}
		if json.Unmarshal(m.Data, &ev) == nil && (ev.Type == "session.created" || ev.Type == "session.updated") {
			select {
			case instructions <- ev.Session.Instructions:
			default:
			}
		}
	})
	offer, err := pc.CreateOffer(nil)
	require.NoError(t, err)
	require.NoError(t, pc.SetLocalDescription(offer))
	resp, answer := post(t, s.url, "application/sdp", offer.SDP)
	require.Equal(t, http.StatusCreated, resp.StatusCode, string(answer))
	require.NoError(t, pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: string(answer)}))
	callID := strings.TrimPrefix(resp.Header.Get("Location"), "/v1/realtime/calls/")
	select {
	case <-instructions:
	case <-time.After(20 * time.Second):
		t.Fatal("no session.created on the data channel")
	}

	// The sideband: a small receive buffer, and it never reads.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 32<<10)
		}); err != nil {
			return err
		}
		return serr
	}}
	tr := &http.Transport{DialContext: d.DialContext}
	defer tr.CloseIdleConnections()
	ws, wsResp, err := websocket.Dial(ctx, s.ws+"?call_id="+callID, &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr},
		HTTPHeader: http.Header{"Authorization": {"Bearer sk"}}})
	if wsResp != nil && wsResp.Body != nil {
		_ = wsResp.Body.Close()
	}
	require.NoError(t, err)
	defer ws.CloseNow()
	require.Eventually(t, func() bool { return s.calls.Sidebands(callID) == 1 }, 5*time.Second, 10*time.Millisecond)
	// Each empty update is echoed with 40 KiB of instructions, to the data channel and the sideband.
	b, err := json.Marshal(event{"type": "session.update", "session": event{"type": "realtime", "instructions": strings.Repeat("a", 40<<10)}})
	require.NoError(t, err)
	require.NoError(t, ws.Write(ctx, websocket.MessageText, b))
	tiny := []byte(`{"type":"session.update","session":{"type":"realtime"}}`)
	// Paced, until the socket is full and the sideband's writer blocks (the server's send buffer
	// may take a few MiB first).
	for sent := 0; s.calls.Sidebands(callID) > 0; sent++ {
		require.Less(t, sent, 2000, "the sideband was never closed")
		if ws.Write(ctx, websocket.MessageText, tiny) != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.Eventually(t, func() bool { return s.calls.Sidebands(callID) == 0 }, 10*time.Second, 10*time.Millisecond, "the slow sideband left")
	require.Eventually(t, func() bool {
		return logs.FilterMessage("sideband is not reading; closing it (1008), the call goes on").Len() == 1
	}, 5*time.Second, 10*time.Millisecond)

	// The call goes on: its data channel still steers and hears the session.
	require.NoError(t, dc.SendText(`{"type":"session.update","session":{"type":"realtime","instructions":"after"}}`))
	deadline := time.After(30 * time.Second)
	for got := ""; got != "after"; {
		select {
		case got = <-instructions:
		case <-deadline:
			t.Fatal("the call's data channel stopped after the sideband was dropped")
		}
	}
	require.Equal(t, 1, s.calls.Active())
}
