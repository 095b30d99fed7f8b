package realtime_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/rtcclient"
)

// TestLiveCall: GPT-Live over the calls' WebRTC stack in one process (the race detector's view
// of the Live call): the POST starts the session (session.started on oai-events, no
// session.start), speech as Opus RTP is transcribed and answered on the track with its
// transcript, a sideband attached by the Live id gets the events and its session.close ends
// the session and the call, freeing the slot.
func TestLiveCall(t *testing.T) {
	t.Parallel()
	s := newCallsServer(t)
	voice := goForward(t) // 24 kHz PCM16
	cfg, err := json.Marshal(map[string]any{"model": "dummy", "instructions": "Be concise."})
	require.NoError(t, err)
	c := dialCall(t, s, rtcclient.Config{Key: "sk", Live: cfg, MicRate: 24000})
	require.True(t, strings.HasPrefix(c.SessionID(), "live_"), c.SessionID())
	ctx := context.Background()
	until := func(typ string, d time.Duration) rtcclient.Event {
		t.Helper()
		ev, err := c.WaitFor(ctx, typ, d)
		require.NoError(t, err)
		return ev
	}
	started := until("session.started", 20*time.Second)
	require.Equal(t, c.SessionID(), started.M["session"].(map[string]any)["id"])

	wsURL := strings.TrimSuffix(s.ws, "/v1/realtime") + "/v1/live/sessions/" + c.SessionID() + "/attach"
	sb, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer sk"}}}) //nolint:bodyclose // coder/websocket closes it
	require.NoError(t, err)
	defer sb.CloseNow()

	pcm := make([]int16, len(voice)/2)
	for i := range pcm {
		pcm[i] = int16(binary.LittleEndian.Uint16(voice[2*i:]))
	}
	pcm = append(pcm, make([]int16, 24000*1500/1000)...)
	micDone := c.StartSpeaking(pcm, time.Time{})
	var heard string
	for !strings.Contains(strings.ToLower(heard), "forward") {
		heard += until("session.input_transcript.delta", 60*time.Second).M["delta"].(string)
	}
	until("session.output_transcript.delta", 60*time.Second)
	require.NoError(t, <-micDone)
	require.Eventually(t, func() bool { return c.Stats().Packets > 10 }, 30*time.Second, 20*time.Millisecond, "the reply plays as RTP")
	require.NotContains(t, c.Seen(), "session.output_audio.delta", "the data channel carries no audio")

	sbSeen := map[string]int{}
	readSB := func(typ string) map[string]any {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for {
			_, b, err := sb.Read(rctx)
			require.NoError(t, err, "waiting for %s on the sideband; seen %v", typ, sbSeen)
			var m map[string]any
			require.NoError(t, json.Unmarshal(b, &m))
			sbSeen[m["type"].(string)]++
			if m["type"] == typ {
				return m
			}
		}
	}
	readSB("session.output_audio.delta")
	require.NoError(t, sb.Write(ctx, websocket.MessageText, []byte(`{"type":"session.close","event_id":"bye"}`)))
	closed := readSB("session.closed")
	require.Equal(t, "close_requested", closed["reason"])
	require.Equal(t, "bye", closed["client_event_id"])
	_, _, err = sb.Read(ctx)
	require.Equal(t, websocket.StatusNormalClosure, websocket.CloseStatus(err), "%v", err)
	until("session.closed", 20*time.Second)
	require.Eventually(t, func() bool { return s.calls.Active() == 0 && s.m.Active() == 0 }, 10*time.Second, 20*time.Millisecond,
		"the session's end ends the call")
}
