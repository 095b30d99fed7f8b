package test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/rtcclient"
)

// A sideband joining a WebRTC Live session gets the last 3 s of its timeline replayed first:
// the events every sideband got in that window, under the same event_ids (a sideband that joins
// again dedupes by them), nothing older, no reflected audio; then the live events, again under
// one id for every sideband.
func TestLiveSidebandReplay(t *testing.T) {
	t.Parallel()
	s := startLiveBinary(t, "--api-key", "sk-live")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := json.Marshal(liveRTCSession())
	require.NoError(t, err)
	c, err := rtcclient.Dial(ctx, rtcclient.Config{BaseURL: "http://" + s.addr, Key: "sk-live", Live: cfg, MicRate: 16000})
	require.NoError(t, err, s.logs.String())
	defer c.Close()
	attach := "ws://" + s.addr + "/v1/live/sessions/" + c.SessionID() + "/attach"
	a := dialSideband(t, attach, "sk-live")
	// The microphone's first packet starts the timeline; from then on it runs as real time.
	mic := c.StartSpeaking(make([]int16, 16000/2), time.Time{})
	require.NoError(t, <-mic)
	// untilType is the next event of typ on sb (the reflected audio skipped).
	untilType := func(sb *sidebandConn, typ string) map[string]any {
		t.Helper()
		for {
			if ev := sb.next(t, 10*time.Second); ev["type"] == typ {
				return ev
			}
		}
	}
	update := func(id string) map[string]any {
		t.Helper()
		a.send(t, map[string]any{"type": "session.update", "event_id": id, "session": map[string]any{}})
		ev := untilType(a, "session.updated")
		require.Equal(t, id, ev["client_event_id"])
		require.NotEmpty(t, ev["event_id"])
		return ev
	}
	old := update("evt_old")
	a.send(t, map[string]any{"type": "session.thinking.append", "event_id": "evt_think", "content": "x", "delegation_id": nil})
	ack := untilType(a, "session.thinking.appended")
	time.Sleep(5 * time.Second) // 5 s of timeline: the first update is out of the window
	recent := update("evt_recent")

	b := dialSideband(t, attach, "sk-live")
	first := b.next(t, 5*time.Second)
	t.Logf("the replay's first event: %v (the old update was at %v ms of timeline)", first["type"], ack["start_ms"])
	require.Equal(t, "session.updated", first["type"], "the replay comes first, before any reflected audio")
	require.Equal(t, recent["event_id"], first["event_id"], "replayed under the id the other sideband got it with")
	require.Equal(t, "evt_recent", first["client_event_id"])
	// A third sideband, joining at once, gets the same replay.
	d := dialSideband(t, attach, "sk-live")
	require.Equal(t, recent["event_id"], d.next(t, 5*time.Second)["event_id"])

	// Then live: the next event reaches every sideband under one id, and the old one was never
	// replayed.
	live := update("evt_live")
	seen := map[string]bool{}
	for {
		ev := b.next(t, 10*time.Second)
		if id, _ := ev["event_id"].(string); id != "" && ev["type"] != "session.input_audio.append" && ev["type"] != "session.output_audio.delta" {
			seen[id] = true
		}
		if ev["client_event_id"] == "evt_live" {
			require.Equal(t, live["event_id"], ev["event_id"], "one id for every sideband")
			break
		}
	}
	require.False(t, seen[old["event_id"].(string)], "the event 5 s back is not replayed")
	require.False(t, seen[ack["event_id"].(string)], "nor the ack of that time")
	require.Equal(t, live["event_id"], untilType(d, "session.updated")["event_id"])
}
