package realtime

import (
	"encoding/base64"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// sentEvents records what the player sends.
type sentEvents struct {
	mu    sync.Mutex
	types []string
}

func (s *sentEvents) Send(ev session.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.types = append(s.types, ev.Type)
	return nil
}

// The browser SDKs barge in with response.cancel and then output_audio_buffer.clear. The
// cancel's epoch fence usually clears the player first; the client's clear must still learn
// which item was cut (to truncate it), and output_audio_buffer.cleared goes out once.
func TestPlayerClearAfterCancelFence(t *testing.T) {
	delta := func(p *player, resp, item string, epoch int) {
		t.Helper()
		pcm := make([]byte, 4800) // 100 ms at 24 kHz
		require.NoError(t, p.delta(session.Event{Type: "response.output_audio.delta", Epoch: epoch, Payload: protocol.ResponseOutputAudioDelta{
			ResponseID: resp, ItemID: item, Delta: base64.StdEncoding.EncodeToString(pcm), Format: "pcm16", SampleRateHz: 24000}}))
	}
	for _, tc := range []struct {
		name      string
		fence     bool   // the cancel's DropStale ran before the client's clear
		newResp   bool   // a new response started playing between the two
		wantItem  string // what the client's clear truncates ("" = nothing)
		wantClear int    // output_audio_buffer.cleared events
	}{
		{"clear alone", false, false, "item_1", 1},
		{"fence, then clear", true, false, "item_1", 1},
		{"fence, a new response, then clear", true, true, "item_2", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := &sentEvents{}
			p := newPlayer(ev, nil, rtcCodec{}, zap.NewNop())
			delta(p, "resp_1", "item_1", 1)
			if tc.fence {
				item, _, had := p.clear(2)
				require.True(t, had)
				require.Equal(t, "item_1", item)
			}
			if tc.newResp {
				delta(p, "resp_2", "item_2", 2)
			}
			item, _, had := p.clear(0)
			require.Equal(t, tc.wantItem != "", had)
			require.Equal(t, tc.wantItem, item)
			require.Len(t, ev.types, tc.wantClear)
			// Consumed: a second clear truncates nothing.
			_, _, had = p.clear(0)
			require.False(t, had)
		})
	}
}

// The hang-up linger follows the call's measured round trip, never below the LAN floor nor
// above the cap: a browser far away still gets the reset's acknowledgement before the abort.
func TestCloseLinger(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		srttS float64
		want  time.Duration
	}{
		{0, dcCloseLinger},              // not measured yet
		{0.0004, dcCloseLinger},         // loopback
		{0.180, 360 * time.Millisecond}, // a long-haul path
		{5, dcCloseLingerMax},           // a pathological estimate
	} {
		require.Equal(t, tt.want, closeLinger(tt.srttS), "srtt %v s", tt.srttS)
	}
}

// A pause in the browser's packets is appended as silence once: by the clock while nothing
// comes, and by the RTP timestamps for what the clock had not covered when packets resume.
func TestQuietFill(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	var q quietFill
	q.packet(t0)
	require.Zero(t, q.quiet(t0.Add(35*time.Millisecond)), "the last packet's own frame and less than one more")
	require.Equal(t, 80*time.Millisecond, q.quiet(t0.Add(115*time.Millisecond)), "whole frames past the packet's own")
	require.Equal(t, 100*time.Millisecond, q.quiet(t0.Add(215*time.Millisecond)), "only what was not appended yet")
	require.Equal(t, 60*time.Millisecond, q.resumed(240*time.Millisecond), "the timestamps say 240 ms were not sent: 180 are in")
	require.Zero(t, q.resumed(240*time.Millisecond), "never twice")
	q.packet(t0.Add(300 * time.Millisecond))
	require.Zero(t, q.resumed(0), "contiguous packets: nothing")
	require.Equal(t, 400*time.Millisecond, q.resumed(410*time.Millisecond), "a DTX pause the clock did not see")
	require.Len(t, appendSilence(nil, 20*time.Millisecond), 960, "20 ms of 24 kHz PCM16")
}
