package session

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/testenv"
)

// TestBargeInOnPitchedSpeech: real speech over a playing response interrupts once it carried a
// pitch for overlapEarlySpeechMs, before the overlapMinSpeechMs that unpitched sound needs, and
// output_audio_buffer.cleared goes out with the decision. The input is fed in 30 ms appends (one
// VAD frame) so the decision's position in the stream is exact to a frame.
func TestBargeInOnPitchedSpeech(t *testing.T) {
	raw := testenv.ReadFile(t, "/usr/share/pocketsphinx/test/data/goforward.raw", "pocketsphinx-testdata")
	eng := &fakeEngine{t: t}
	s, sk, _, wait := startSessionWith(t, eng, time.Minute, // the response stays active
		ConfigPatch{TurnDetectionSet: true, TurnDetection: turnPatch(tdType("server_vad"), tdCreateResponse(false)),
			InputFormat: &AudioFormat{Type: "pcm16", Rate: 16000}})
	ctx := context.Background()
	require.NoError(t, s.Submit(ctx, &AppendAudio{Data: make([]byte, 3200)}))
	require.NoError(t, s.Submit(ctx, &CommitInput{ResponseCreate: ptr(true)}))
	sk.until(t, "response.output_audio.delta")

	in := append(make([]byte, 16000), raw...) // 500 ms of silence, then the speech
	const chunk = 960                         // 30 ms at 16 kHz pcm16
	fedMs, decidedMs := 100, -1
	var onsetMs int
	for off := 0; off < len(in) && decidedMs < 0; off += chunk {
		require.NoError(t, s.Submit(ctx, &AppendAudio{Data: in[off:min(off+chunk, len(in))]}))
		fedMs += 30
		types := drainUntilAck(t, s, sk)
		if i := slices.Index(types, "overlap.decision"); i >= 0 {
			decidedMs = fedMs
			require.Less(t, slices.Index(types, "input_audio_buffer.speech_started"), i)
			require.Less(t, i, slices.Index(types, "output_audio_buffer.cleared"), "cleared goes out with the decision")
		}
	}
	require.Positive(t, decidedMs, "the speech did not interrupt")
	sk.mu.Lock()
	for _, ev := range sk.events {
		if ev.typ() == "input_audio_buffer.speech_started" {
			onsetMs = effectOf[InputSpeech](t, ev).AudioMs + defaultTurnDetection().PrefixPaddingMs
		}
	}
	sk.mu.Unlock()
	t.Logf("speech onset at %d ms of input, barge-in decided at %d ms: %d ms of speech", onsetMs, decidedMs, decidedMs-onsetMs)
	require.Less(t, decidedMs-onsetMs, overlapMinSpeechMs, "decided before the unpitched rule could")
	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	require.Equal(t, ReasonClientClose, wait())
}
