package session

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// idleWait: the idle timeout counts from the end of the audio still ahead of the client.
func TestIdleWait(t *testing.T) {
	t0 := time.Unix(100, 0)
	tests := []struct {
		name string
		r    *response
		now  time.Time
		want time.Duration
	}{
		{"nothing played", &response{}, t0, 5 * time.Second},
		{"played in real time", &response{play: playback{started: t0, sentMs: 2000}}, t0.Add(2 * time.Second), 5 * time.Second},
		{"1.5 s still ahead", &response{play: playback{started: t0, sentMs: 3500}}, t0.Add(2 * time.Second), 6500 * time.Millisecond},
		{"behind real time", &response{play: playback{started: t0, sentMs: 1000}}, t0.Add(2 * time.Second), 5 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, idleWait(5000, tc.r, tc.now))
		})
	}
	f := newIdleFollowUp()
	f.arm(time.Millisecond, 1234)
	require.Equal(t, 1234.0, f.fromMs)
	<-f.timer.C
	f.arm(time.Hour, 0)
	f.stop()
	select {
	case <-f.timer.C:
		t.Fatal("a stopped follow-up does not fire")
	default:
	}
}

// fired: the idle timeout's step, from the input and the session's business.
func TestIdleFired(t *testing.T) {
	td := &TurnDetection{IdleTimeoutMs: 5000}
	tests := []struct {
		name      string
		td        *TurnDetection
		in        inputAudio
		fromMs    float64
		busy      bool
		auto      bool
		want      idleStep
		wantStart int
		keepsID   bool
	}{
		{"off", nil, inputAudio{inputMs: 9000}, 0, false, false, idleStep{}, 0, false},
		{"busy", td, inputAudio{inputMs: 9000}, 0, true, false, idleStep{}, 0, false},
		{"the user speaks", td, inputAudio{inputMs: 9000, inSpeech: true}, 0, false, false, idleStep{}, 0, false},
		{"silence after the reply: a response", td, inputAudio{inputMs: 12000}, 6000, false, false, idleStep{fire: true}, 7000, false},
		{"armed later than the window", td, inputAudio{inputMs: 9000}, 6000, false, false, idleStep{fire: true}, 6000, false},
		{"buffered audio: committed", td, inputAudio{inputMs: 9000, bufStartMs: 8000, inputBuf: [][]float32{{0}}}, 0, false, false,
			idleStep{fire: true, commit: true}, 4000, true},
		{"too little buffered", td, inputAudio{inputMs: 9000, bufStartMs: 8950, inputBuf: [][]float32{{0}}}, 0, false, false,
			idleStep{fire: true}, 4000, false},
		{"auto-response: never committed here", td, inputAudio{inputMs: 9000, bufStartMs: 0, inputBuf: [][]float32{{0}}}, 0, false, true,
			idleStep{fire: true}, 4000, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := idleFollowUp{fromMs: tc.fromMs}
			in := tc.in
			st := f.fired(&in, tc.td, tc.busy, tc.auto, 3)
			require.Equal(t, tc.want.fire, st.fire)
			require.Equal(t, tc.want.commit, st.commit)
			if !st.fire {
				require.Empty(t, in.speechItemID)
				return
			}
			ev := st.event.Effect.(InputTimeout)
			require.Equal(t, 3, st.event.Epoch)
			require.Equal(t, tc.wantStart, ev.AudioStartMs)
			require.Equal(t, int(tc.in.inputMs), ev.AudioEndMs)
			require.NotEmpty(t, ev.ItemID)
			if tc.keepsID {
				require.Equal(t, ev.ItemID, in.speechItemID, "the commit takes the announced id")
			} else {
				require.Empty(t, in.speechItemID)
			}
		})
	}
}
