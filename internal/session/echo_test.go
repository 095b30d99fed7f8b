package session

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/testenv"
)

// TestEchoDoesNotBargeIn: a client without echo cancellation feeds the assistant's own voice
// (real speech, as the session sent it) back at −6 dB, 120 ms late; under server_vad with a
// response active that never starts speech or barges in. Real user speech over the same echo
// still barges in.
func TestEchoDoesNotBargeIn(t *testing.T) {
	assistant16 := pcmFromRaw(testenv.ReadFile(t, "/usr/share/pocketsphinx/test/data/goforward.raw", "pocketsphinx-testdata"))
	user := pcmFromRaw(testenv.ReadFile(t, "/usr/share/pocketsphinx/test/data/numbers.raw", "pocketsphinx-testdata"))[:2*EngineRate]
	assistant, err := audio.Resample(assistant16, EngineRate, OutputRate)
	require.NoError(t, err)

	for _, withUser := range []bool{false, true} {
		eng := &fakeEngine{t: t, speak: assistant}
		// A minute of lead: all of the reply is sent at once and the response stays active.
		s, sk, _, wait := startSessionWith(t, eng, time.Minute,
			ConfigPatch{TurnDetectionSet: true, TurnDetection: turnPatch(tdType("server_vad"), tdCreateResponse(false)),
				InputFormat: &AudioFormat{Type: "pcm16", Rate: EngineRate}})
		ctx := context.Background()
		appendChunks := func(x []float32) {
			b := pcm16(x)
			for i := 0; i < len(b); i += 3200 { // 100 ms chunks, as a client streams them
				require.NoError(t, s.Submit(ctx, &AppendAudio{Data: b[i:min(i+3200, len(b))]}))
			}
		}
		appendChunks(make([]float32, 1600))
		require.NoError(t, s.Submit(ctx, &CommitInput{ResponseCreate: ptr(true)}))
		sk.until(t, "response.created")
		// What the client received, in order: the reference the echo is made of.
		var sent []float32
		for len(sent) < len(assistant) {
			ev := sk.until(t, "response.output_audio.delta")
			b := effectOf[OutputDelta](t, ev).Audio
			for i := 0; i+1 < len(b); i += 2 {
				sent = append(sent, float32(int16(binary.LittleEndian.Uint16(b[i:])))/32768)
			}
		}
		played, err := audio.Resample(sent, OutputRate, EngineRate)
		require.NoError(t, err)
		mic := make([]float32, 1920+len(played)) // 120 ms of room and playback delay
		for i, v := range played {
			mic[1920+i] = 0.5 * v
		}
		if withUser {
			for i, v := range user {
				if 8000+i < len(mic) {
					mic[8000+i] += v
				}
			}
		}
		appendChunks(mic)
		types := drainUntilAck(t, s, sk)
		if withUser {
			require.Contains(t, types, "input_audio_buffer.speech_started", "speech over the echo must be heard")
			require.Contains(t, types, "response.done", "speech over the echo barges in")
		} else {
			require.NotContains(t, types, "input_audio_buffer.speech_started", "the echo was taken for speech")
			require.NotContains(t, types, "overlap.decision")
			require.NotContains(t, types, "response.done")
		}
		require.NoError(t, s.Submit(ctx, &CloseSession{}))
		require.Equal(t, ReasonClientClose, wait())
	}
}

func pcmFromRaw(b []byte) []float32 {
	out := make([]float32, len(b)/2)
	for i := range out {
		out[i] = float32(int16(binary.LittleEndian.Uint16(b[2*i:]))) / 32768
	}
	return out
}
