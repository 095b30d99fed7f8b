package api

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// TestChatOutputAudioLength: talker audio at another rate than 24 kHz, converted chunk by chunk
// through the request's streaming resampler, comes out with exactly ceil(n·24000/rate) samples
// once the resampler's tail is flushed at the end, and equal to converting the clip at once.
func TestChatOutputAudioLength(t *testing.T) {
	for _, rate := range []int{8000, 16000, 22050, 44100, 48000} {
		for _, chunks := range [][]int{{4410}, {160, 160, 333, 1000, 7}, {1, 2, 3, 5, 8, 13, 21, 34, 55, 89}} {
			t.Run(fmt.Sprintf("%d Hz %v", rate, chunks), func(t *testing.T) {
				var src []float32
				o := &chatOutput{audio: true}
				var pcm []float32
				for i, n := range chunks {
					c := make([]float32, n)
					for j := range c {
						c[j] = float32(0.5 * math.Sin(2*math.Pi*440*float64(len(src)+j)/float64(rate)))
					}
					src = append(src, c...)
					out, err := o.convertAudio(requestclient.ChatEvent{Audio: c, SampleRate: rate, Done: i == len(chunks)-1})
					require.NoError(t, err)
					pcm = append(pcm, out...)
				}
				beforeFlush := len(pcm)
				pcm = append(pcm, o.flushAudio()...)
				want := audio.ResampledLen(len(src), rate, chatAudioRate)
				require.Equal(t, want, len(pcm), "samples out (before the flush: %d)", beforeFlush)
				whole, err := audio.Resample(src, rate, chatAudioRate)
				require.NoError(t, err)
				require.InDeltaSlice(t, whole, pcm, 1e-6, "chunked equals whole")
				require.Empty(t, o.flushAudio(), "a second flush adds nothing")
			})
		}
	}
	// At the talker's own rate nothing is resampled and nothing is held back.
	o := &chatOutput{audio: true}
	out, err := o.convertAudio(requestclient.ChatEvent{Audio: make([]float32, 480), SampleRate: chatAudioRate})
	require.NoError(t, err)
	require.Len(t, out, 480)
	require.Nil(t, o.flushAudio())
}
