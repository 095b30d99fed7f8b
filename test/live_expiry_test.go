package test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/rtcclient"
)

// liveLength is the session length the expiry tests configure (realtime.max_session_length):
// long enough for a spoken turn to be playing when it ends.
const liveLength = 10 * time.Second

// A GPT-Live session ends at its expires_at (--max-session-length): session.closed {reason:
// "expired", session, usage} is its last event and the socket closes 1000, the reply that was
// playing is finalized as `close` in the --log-stats tables and in Prometheus; a WebRTC Live
// session ends the same way on its data channel and its sideband.
func TestLiveSessionExpires(t *testing.T) {
	t.Parallel()
	s := startLiveBinary(t, "--max-session-length", liveLength.String(), "--log-stats", "--dummy-reply-words", "300",
		"--api-key", "sk-live")
	t.Run("websocket", func(t *testing.T) {
		connected := time.Now()
		c := dialLive(t, s, http.Header{"Authorization": {"Bearer sk-live"}})
		c.send(t, map[string]any{"type": "session.start", "session": map[string]any{"model": "gpt-live-1",
			"audio": map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 16000}}}})
		started := c.until(t, "session.started", 30*time.Second)
		expiresAt := int64(started["session"].(map[string]any)["expires_at"].(float64))
		require.InDelta(t, connected.Add(liveLength).Unix(), expiresAt, 1, "expires_at is the session's start plus its length")
		st := streamLive(t, c)
		st.say(goForwardPCM(t))
		// The model answers (a long reply: 300 words) and is still speaking when the session ends.
		waitFor(t, liveLength, "the model's reply before the session's end", func() bool { return c.count("session.output_audio.delta") > 0 })
		closed := c.until(t, "session.closed", liveLength+10*time.Second)
		at := closed[recvKey].(time.Time)
		t.Logf("session.closed %v after the connection (length %v; expires_at %d, received %.3f)", at.Sub(connected).Round(time.Millisecond),
			liveLength, expiresAt, float64(at.UnixMilli())/1000)
		require.Equal(t, "expired", closed["reason"])
		require.NotContains(t, closed, "client_event_id", "no command caused it")
		require.Equal(t, started["session"].(map[string]any)["id"], closed["session"].(map[string]any)["id"])
		require.Positive(t, closed["usage"].(map[string]any)["seconds"], "the final usage: the timeline ran")
		require.InDelta(t, liveLength.Seconds(), at.Sub(connected).Seconds(), 1.5, "ended at expires_at")
		<-c.done
		st.halt()
		require.Equal(t, websocket.StatusNormalClosure, websocket.CloseStatus(c.readErr))
		c.mu.Lock()
		require.Equal(t, "session.closed", c.all[len(c.all)-1]["type"], "session.closed is the last event")
		c.mu.Unlock()
		// The reply the end cut short is a turn logged `close` (the tables, then Prometheus).
		require.Eventually(t, func() bool {
			for _, r := range statsRecords(s.logs.String()) {
				if r.Msg == "OmniTiming" && r.Dialect == "live" && r.Reason == "close" {
					return true
				}
			}
			return false
		}, 15*time.Second, 50*time.Millisecond, "a Live turn logged with reason close:\n%s", s.logs.String())
		require.GreaterOrEqual(t, metricLabeled(t, s, "omniserve_duplex_turns_total", `dialect="live"`, `finished_reason="close"`), 1.0)
	})
	t.Run("webrtc", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cfg, err := json.Marshal(liveRTCSession())
		require.NoError(t, err)
		created := time.Now()
		c, err := rtcclient.Dial(ctx, rtcclient.Config{BaseURL: "http://" + s.addr, Key: "sk-live", Live: cfg, MicRate: 16000})
		require.NoError(t, err, s.logs.String())
		defer c.Close()
		sb := dialSideband(t, "ws://"+s.addr+"/v1/live/sessions/"+c.SessionID()+"/attach", "sk-live")
		var dcClosed map[string]any
		for dcClosed == nil {
			ev, err := c.Next(ctx)
			require.NoError(t, err, "the data channel ended before session.closed")
			require.NotEqual(t, "error", ev.Type, "%s", ev.Data)
			if ev.Type == "session.started" {
				exp := int64(ev.M["session"].(map[string]any)["expires_at"].(float64))
				require.InDelta(t, created.Add(liveLength).Unix(), exp, 2, "expires_at")
			}
			if ev.Type == "session.closed" {
				dcClosed = ev.M
			}
		}
		t.Logf("WebRTC Live session.closed %v after the POST", time.Since(created).Round(time.Millisecond))
		require.Equal(t, "expired", dcClosed["reason"])
		require.InDelta(t, liveLength.Seconds(), time.Since(created).Seconds(), 2)
		var sbClosed map[string]any
		for sbClosed == nil {
			ev := sb.next(t, 10*time.Second)
			if ev["type"] == "session.closed" {
				sbClosed = ev
			}
		}
		require.Equal(t, "expired", sbClosed["reason"])
		require.Equal(t, websocket.StatusNormalClosure, sb.closeStatus(t, 15*time.Second), "the sideband closes 1000 after session.closed")
		select {
		case <-c.ChannelClosed():
		case <-time.After(15 * time.Second):
			t.Fatal("the data channel stayed open after the session expired")
		}
		require.Contains(t, s.logs.String(), `"reason":"expired"`, "the session's end is logged as expired")
	})
}
