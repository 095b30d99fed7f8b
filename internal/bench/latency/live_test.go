package latency

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLivePlaybackAudible places the output track on the playback clock: silent filler frames
// advance it, the first audible sample counts only from the end of the user's speech (a
// backchannel before it is not the reply), and the last audible sample follows the track.
func TestLivePlaybackAudible(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 7, 15, 0, 0, 0, time.UTC)
	at := func(v int) time.Time { return t0.Add(time.Duration(v) * time.Millisecond) }
	frame := func(arrive int, audibleFromMs int) liveEvent {
		pcm := make([]float32, 100*outRate/1000)
		if audibleFromMs >= 0 {
			for i := audibleFromMs * outRate / 1000; i < len(pcm); i++ {
				pcm[i] = 0.2
			}
		}
		return liveEvent{typ: "session.output_audio.delta", at: at(arrive), pcm: pcm}
	}
	lp := livePlayback{from: at(250)}
	lp.add(frame(0, 50))   // a backchannel at 50 ms: before from
	lp.add(frame(100, -1)) // silence 100..200
	require.True(t, lp.firstAudible.IsZero())
	require.Equal(t, at(0).Add(time.Duration(100*outRate/1000-1)*time.Second/outRate), lp.lastAudible, "the backchannel's last audible sample")
	lp.add(frame(150, -1)) // queued: plays 200..300, silent
	lp.add(frame(160, 40)) // queued: plays 300..400, audible from 340
	require.Equal(t, at(340), lp.firstAudible)
	require.Equal(t, at(300).Add(time.Duration(100*outRate/1000-1)*time.Second/outRate), lp.lastAudible)
}

// TestLiveMic: the microphone sends the script, then silence, in 100 ms units; speech said
// later is mixed in at its sample.
func TestLiveMic(t *testing.T) {
	t.Parallel()
	per := inRate * chunkMs / 1000
	m := &liveMic{start: time.Now(), script: []float32{0.5, 0.5}}
	u := m.next()
	require.Len(t, u, per)
	require.Equal(t, []float32{0.5, 0.5, 0}, u[:3])
	require.Equal(t, make([]float32, per), m.next(), "silence after the script")
	m.say(m.sent+1, []float32{0.25})
	u = m.next()
	require.Equal(t, []float32{0, 0.25, 0}, u[:3])
	require.Equal(t, dueAt(m.start, 3*per), m.due())
}
