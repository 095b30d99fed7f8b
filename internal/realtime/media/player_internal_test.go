package media

import (
	"encoding/base64"
	"sync"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/link"
)

// sentEvents records what the player sends.
type sentEvents struct {
	mu    sync.Mutex
	types []string
}

func (s *sentEvents) Send(ev link.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.types = append(s.types, ev.Type)
	return nil
}

// The browser SDKs barge in with response.cancel and then output_audio_buffer.clear. The
// cancel's epoch fence usually clears the player first; the client's clear must still learn
// which item was cut (to truncate it), and output_audio_buffer.cleared goes out once.
func TestPlayerClearAfterCancelFence(t *testing.T) {
	delta := func(p *Player, resp, item string, epoch int) {
		t.Helper()
		pcm := make([]byte, 4800) // 100 ms at 24 kHz
		require.NoError(t, p.Delta(protocol.ResponseOutputAudioDelta{
			ResponseID: resp, ItemID: item, Delta: base64.StdEncoding.EncodeToString(pcm), Format: "pcm16", SampleRateHz: 24000}, epoch))
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
			p := NewPlayer(ev, nil, Codec{}, zap.NewNop())
			delta(p, "resp_1", "item_1", 1)
			if tc.fence {
				item, _, had := p.Clear(2)
				require.True(t, had)
				require.Equal(t, "item_1", item)
			}
			if tc.newResp {
				delta(p, "resp_2", "item_2", 2)
			}
			item, _, had := p.Clear(0)
			require.Equal(t, tc.wantItem != "", had)
			require.Equal(t, tc.wantItem, item)
			require.Len(t, ev.types, tc.wantClear)
			// Consumed: a second clear truncates nothing.
			_, _, had = p.Clear(0)
			require.False(t, had)
		})
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

// The pacer writes a talk-spurt's first frame at once and the frames within its lead right
// after it, then one per frame time; the marker bit starts each spurt; and across a pause the
// RTP timestamp advances by exactly the pause (a frame more would make the browser's jitter
// buffer hold the next reply back by that frame), across a long one by rtcPauseCut less.
func TestPacer(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	p := newPacer(CodecOpus, 40*time.Millisecond)
	type frame struct {
		at     time.Duration // written at t0+at
		dry    bool          // the queue ran dry before it
		wait   time.Duration // what wait says at that moment
		marker bool
		ts     uint32
	}
	for i, f := range []frame{
		{at: ms(3), dry: true, wait: 0, marker: true, ts: 0},                     // the first spurt: at once
		{at: ms(3), wait: 0, ts: 960},                                            // within the lead: at once
		{at: ms(3), wait: 0, ts: 1920},                                           // the lead's last frame
		{at: ms(3), wait: ms(20), ts: 2880},                                      // the next waits a frame time…
		{at: ms(43), wait: 0, ts: 3840},                                          // …then one per 20 ms
		{at: ms(110), wait: 0, ts: 4800},                                         // late (due at 103 ms), but the queue never ran dry: same spurt
		{at: ms(120), dry: true, wait: 0, ts: 5760},                              // ran dry and refilled before its end (123 ms): same spurt
		{at: ms(500), dry: true, wait: 0, marker: true, ts: 5760 + 960 + 357*48}, // a pause of 357 ms after the end at 143 ms
		{at: ms(500), wait: 0, ts: 5760 + 2*960 + 357*48},
		// A pause of 3 s after the end at 540 ms: advanced by 250 ms less, so the browser's
		// jitter buffer plays the spurt as it arrives.
		{at: ms(3540), dry: true, wait: 0, marker: true, ts: 5760 + 3*960 + 357*48 + 2750*48},
		{at: ms(3540), wait: 0, ts: 5760 + 4*960 + 357*48 + 2750*48},
	} {
		now := t0.Add(f.at)
		require.Equal(t, f.wait, p.wait(now), "frame %d: wait", i)
		if f.wait > 0 {
			now = now.Add(f.wait)
		}
		h, _ := p.take(now, f.dry)
		require.Equal(t, f.marker, h.Marker, "frame %d: marker", i)
		require.Equal(t, f.ts, h.Timestamp, "frame %d: timestamp", i)
		require.Equal(t, uint16(i), h.SequenceNumber, "frame %d: sequence number", i)
	}
}

// rtpLog records the packets the player writes.
type rtpLog struct {
	mu    sync.Mutex
	pkts  []rtp.Header
	first time.Time // when the first packet was written
}

func (l *rtpLog) WriteRTP(p *rtp.Packet) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pkts) == 0 {
		l.first = time.Now()
	}
	l.pkts = append(l.pkts, p.Header)
	return nil
}

// runPlayer starts an Opus call's player writing into an rtpLog; the test's cleanup stops it
// and waits for it.
func runPlayer(t *testing.T) (*Player, *sentEvents, *rtpLog) {
	t.Helper()
	ev, out := &sentEvents{}, &rtpLog{}
	p := NewPlayer(ev, out, CodecOpus, zap.NewNop())
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); p.Run(stop) }()
	t.Cleanup(func() { close(stop); <-done })
	return p, ev, out
}

// queueReply hands the player ms of silent 24 kHz PCM16 of response resp_1 as one delta.
func queueReply(t *testing.T, p *Player, ms int) {
	t.Helper()
	pcm := make([]byte, ms*24*2)
	require.NoError(t, p.Delta(protocol.ResponseOutputAudioDelta{
		ResponseID: "resp_1", ItemID: "item_1", Delta: base64.StdEncoding.EncodeToString(pcm), Format: "pcm16", SampleRateHz: 24000}, 1))
}

// A reply is written as one talk-spurt: every frame of its audio (the last padded), the marker
// on the first only, contiguous sequence numbers and timestamps; output_audio_buffer.started
// before and .stopped after, once response.done has passed.
func TestPlayerWritesReplyAsOneSpurt(t *testing.T) {
	t.Parallel()
	p, ev, out := runPlayer(t)
	for range 3 { // 3 deltas of 70 ms: 210 ms, 11 frames
		queueReply(t, p, 70)
	}
	p.ResponseDone("resp_1")
	require.Eventually(t, func() bool {
		ev.mu.Lock()
		defer ev.mu.Unlock()
		return len(ev.types) == 2
	}, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, []string{"output_audio_buffer.started", "output_audio_buffer.stopped"}, ev.types)
	out.mu.Lock()
	defer out.mu.Unlock()
	require.Len(t, out.pkts, 11)
	for i, h := range out.pkts {
		require.Equal(t, i == 0, h.Marker, "packet %d", i)
		require.Equal(t, uint16(i), h.SequenceNumber, "packet %d", i)
		require.Equal(t, uint32(i*960), h.Timestamp, "packet %d", i)
	}
}

// A barge-in truncates the reply to what had played: the frames written ahead of their place in
// real time (the pacer's lead, 2–3 frames at a spurt's start) have not played yet and do not
// count. At most the time since the first packet went out has played.
func TestPlayerClearCountsOnlyPlayedFrames(t *testing.T) {
	t.Parallel()
	p, _, out := runPlayer(t)
	queueReply(t, p, 500)
	require.Eventually(t, func() bool {
		out.mu.Lock()
		defer out.mu.Unlock()
		return len(out.pkts) >= 2 // the lead's frames, written at once
	}, 5*time.Second, time.Millisecond)
	item, played, had := p.Clear(0)
	out.mu.Lock()
	elapsed, written := time.Since(out.first), len(out.pkts)*20
	out.mu.Unlock()
	require.True(t, had)
	require.Equal(t, "item_1", item)
	require.LessOrEqual(t, played, int(elapsed/time.Millisecond)+2, "more counted as played than the time since the first packet (%d ms written)", written)
}
