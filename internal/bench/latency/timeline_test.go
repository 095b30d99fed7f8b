package latency

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/benchreport"
)

// TestPlaybackSpans checks the playback clock's stretches: deltas that arrive while audio is
// still playing extend the stretch, one that arrives after it ran dry (an underrun) starts a
// new one, and stop cuts everything after the flush.
func TestPlaybackSpans(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 20, 0, 0, 0, time.UTC)
	ms := func(v int) time.Time { return t0.Add(time.Duration(v) * time.Millisecond) }
	audio := func(at, lenMs int) event {
		return event{typ: "audio", at: ms(at), pcm: make([]float32, lenMs*outRate/1000)}
	}
	var pb playback
	pb.add(audio(100, 200)) // plays 100..300
	pb.add(audio(150, 200)) // queued: 300..500
	pb.add(audio(700, 100)) // underrun: 700..800
	pb.add(audio(720, 0))   // an empty delta adds nothing
	require.Equal(t, [][2]time.Time{{ms(100), ms(500)}, {ms(700), ms(800)}}, pb.spans)
	pb.stop(ms(400))
	require.Equal(t, [][2]time.Time{{ms(100), ms(400)}}, pb.spans)
}

// TestTimelineVAD checks that the VAD's audio_start_ms / audio_end_ms, positions on the session's
// input audio clock, land where the client had that audio due, across a pause between two
// paced streams.
func TestTimelineVAD(t *testing.T) {
	t.Parallel()
	tl := newTimeline("s")
	ms := func(v int) time.Time { return tl.t0.Add(time.Duration(v) * time.Millisecond) }
	per := inRate / 10 // 100 ms units
	cl := &client{
		// Two units streamed from 1000 ms, then, after a pause, one from 5000 ms.
		units: []sentUnit{{pos: 0, due: ms(1000)}, {pos: per, due: ms(1100)}, {pos: 2 * per, due: ms(5000)}},
		sent:  3 * per,
		vad: []vadMark{
			{kind: benchreport.SpeechStarted, ms: 50},  // in the first unit
			{kind: benchreport.SpeechStopped, ms: 100}, // the second unit's first sample
			{kind: benchreport.SpeechStarted, ms: 230}, // 30 ms into the unit after the pause
		},
	}
	tl.vad(cl)
	tl.interval(benchreport.UserSpeech, ms(900), ms(800), "reversed: left out")
	got := tl.session()
	require.Equal(t, "s", got.Label)
	require.Equal(t, []benchreport.Span{
		{Kind: benchreport.SpeechStarted, StartMs: 1050, EndMs: 1050, Label: "audio_start_ms 50"},
		{Kind: benchreport.SpeechStopped, StartMs: 1100, EndMs: 1100, Label: "audio_end_ms 100"},
		{Kind: benchreport.SpeechStarted, StartMs: 5030, EndMs: 5030, Label: "audio_start_ms 230"},
	}, got.Spans)
}
