package session

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// end: the active response goes, its engine turn is over, and a response in the conversation
// answers one pending input (an out-of-band one answers none).
func TestResponsesEnd(t *testing.T) {
	tests := []struct {
		name        string
		r           *response
		pending     int
		lastClosed  int
		wantPending int
		wantClosed  int
	}{
		{"none active", nil, 1, 3, 1, 3},
		{"answers an input", &response{turn: bound(5)}, 2, 3, 1, 5},
		{"out of band answers none", &response{turn: bound(5), outOfBand: true}, 2, 3, 2, 5},
		{"never bound to a turn", &response{turn: requestclient.NewTurn(1)}, 1, 3, 0, 3},
		{"no input pending", &response{turn: bound(2)}, 0, 3, 0, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := newResponses("duplex-test", 0)
			rs.resp, rs.pendingIn, rs.lastClosed = tc.r, tc.pending, tc.lastClosed
			require.Same(t, tc.r, rs.end())
			require.Nil(t, rs.resp)
			require.Equal(t, tc.wantPending, rs.pendingIn)
			require.Equal(t, tc.wantClosed, rs.lastClosed)
			require.True(t, rs.over(tc.wantClosed))
			require.False(t, rs.over(tc.wantClosed+1))
		})
	}
	rs := newResponses("duplex-test", 0)
	require.False(t, rs.over(0), "a new session has no turn over")
}

func TestResponsesKeepUsage(t *testing.T) {
	u := usage{inAudio: 10, outAudio: 20}
	tests := []struct {
		name string
		r    *response
		keep bool
	}{
		{"counted, over the conversation", &response{engineUsage: &duplex.Usage{}}, true},
		{"not counted by the engine", &response{}, false},
		{"its own input[]", &response{engineUsage: &duplex.Usage{}, ownInput: true}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := newResponses("duplex-test", 0)
			rs.keepUsage(tc.r, u)
			require.Equal(t, tc.keep, rs.lastUsage == u)
		})
	}
}

// nextFrame keeps at most the lead ahead of real time and counts the client's underruns.
func TestResponseNextFrame(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r := &response{audio: true, play: playback{playedMs: -1}, format: AudioFormat{Type: "pcm16", Rate: 24000}}
	r.play.queueAudio(make([]float32, OutputRate), "hello", r.format, false, frameMs) // 1 s: ten 100 ms frames
	require.Len(t, r.play.frames, 10)
	require.Equal(t, "hello", r.play.frames[0].text)
	require.Empty(t, r.play.frames[1].text)
	require.Len(t, r.play.frames[0].data, 2*OutputRate/10)

	const lead = 300
	steps := []struct {
		now      int // ms after the first frame
		sends    int // frames sent now
		wait     time.Duration
		underrun float64
	}{
		{0, 4, 100 * time.Millisecond, 0}, // 0..400 ms: sent up to lead past real time
		{50, 0, 50 * time.Millisecond, 0}, // nothing more until 100 ms
		{100, 1, 100 * time.Millisecond, 0},
		{900, 5, 0, 400}, // the client ran dry at 500 ms: 400 ms of underrun, then the rest
	}
	for i, st := range steps {
		sent := 0
		var wait time.Duration
		for {
			_, w, ok := r.play.nextFrame(at(st.now), lead)
			if !ok {
				wait = w
				break
			}
			sent++
		}
		require.Equal(t, st.sends, sent, "step %d", i)
		require.Equal(t, st.wait, wait, "step %d", i)
		require.InDelta(t, st.underrun, r.play.underrunMs, 0.001, "step %d", i)
	}
	require.InDelta(t, 1000, r.play.sentMs, 0.001)
	require.Equal(t, "hello", r.heardText(), "no ack: everything sent was heard")
}

// joinTranscript, settleItem and assumePlayed: what the user heard of a cut response.
func TestResponseHeard(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// sent is a response that sent three 500 ms phrases at t0.
	sent := func() *response {
		r := &response{audio: true, play: playback{playedMs: -1, ackedMs: -1}, format: AudioFormat{Type: "pcm16", Rate: 24000}}
		for _, phrase := range []string{"Go", "forward", " ten meters"} {
			r.play.queueAudio(make([]float32, OutputRate/2), r.out.joinTranscript(phrase), r.format, true, frameMs)
		}
		for {
			if _, _, ok := r.play.nextFrame(t0, 10_000); !ok {
				return r
			}
		}
	}
	r := sent()
	require.Equal(t, "Go forward ten meters", r.out.transcript.String())
	require.NotNil(t, r.play.sent)
	require.InDelta(t, 1500, r.play.sentMs, 0.001)
	withRef := &response{format: AudioFormat{Type: "pcm16", Rate: 24000}}
	withRef.play.queueAudio(make([]float32, OutputRate/10), "", withRef.format, true, frameMs)
	require.Len(t, withRef.play.frames[0].ref, EngineRate/10, "kept as the echo reference, at 16 kHz")
	tests := []struct {
		name      string
		playedMs  float64 // -1: no ack
		cutAt     int     // ms after the first frame
		truncated bool
		wantText  string
		wantMs    float64
	}{
		{"pacing clock, mid second phrase", -1, 700, false, "Go forward", 700},
		{"pacing clock past the end", -1, 5000, false, "Go forward ten meters", 1500},
		{"ack wins over the clock", 200, 1400, false, "Go", 200},
		{"truncated: no text", -1, 700, true, "", 700},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := sent()
			c.play.playedMs, c.truncated = tc.playedMs, tc.truncated
			c.play.assumePlayed(t0.Add(time.Duration(tc.cutAt) * time.Millisecond))
			it := &item{Text: "stale", AudioMs: 99}
			c.settleItem(it)
			require.Equal(t, tc.wantText, it.Text)
			require.InDelta(t, tc.wantMs, it.AudioMs, 0.001)
		})
	}
}

func TestDoneStatus(t *testing.T) {
	tests := []struct {
		finish, status, reason, detail string
	}{
		{"stop", "completed", "stop", ""},
		{"", "completed", "stop", ""},
		{"length", "incomplete", "stop", "max_output_tokens"},
		{"error", "failed", "error", "engine_error"},
		{"abort", "cancelled", "abort", "abort"},
		{duplex.FinishToolCalls, "completed", duplex.FinishToolCalls, ""},
	}
	for _, tc := range tests {
		t.Run(tc.finish, func(t *testing.T) {
			status, reason, details := doneStatus(tc.finish)
			require.Equal(t, tc.status, status)
			require.Equal(t, tc.reason, reason)
			if tc.detail == "" {
				require.Nil(t, details)
				return
			}
			require.Equal(t, tc.status, details.Type)
			require.Equal(t, tc.detail, details.Reason)
		})
	}
}

// bound is a turn handle bound to engine turn n.
func bound(n int) requestclient.Turn {
	t := requestclient.NewTurn(n)
	t.Bind(n)
	return t
}
