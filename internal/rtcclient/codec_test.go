package rtcclient

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestG711RoundTrip: a frame encoded by the microphone's G.711 encoder decodes to the same
// tone within the codec's quantisation, for both laws; G.711 refuses other rates than 8 kHz and
// an unknown codec is refused when dialing.
func TestG711RoundTrip(t *testing.T) {
	t.Parallel()
	for _, codec := range []string{CodecPCMU, CodecPCMA} {
		t.Run(codec, func(t *testing.T) {
			t.Parallel()
			enc, err := newEncoder(codec, 8000)
			require.NoError(t, err)
			pcm := make([]int16, enc.FrameSamples())
			require.Len(t, pcm, 160, "20 ms at 8 kHz")
			for i := range pcm {
				pcm[i] = int16(8000 * math.Sin(2*math.Pi*440*float64(i)/8000))
			}
			pkt := make([]byte, 1500)
			n, err := enc.Encode(pcm, pkt)
			require.NoError(t, err)
			require.Equal(t, 160, n, "a byte per sample")
			dec, rate, err := newDecoder("audio/"+codec, 24000)
			require.NoError(t, err)
			require.Equal(t, 8000, rate)
			out := make([]int16, 960)
			m, err := dec.Decode(pkt[:n], out)
			require.NoError(t, err)
			require.Equal(t, 160, m)
			for i := range pcm {
				require.InDelta(t, pcm[i], out[i], 300, "sample %d", i) // G.711's step at this level
			}
			_, err = newEncoder(codec, 16000)
			require.ErrorContains(t, err, "8000 Hz")
		})
	}
	_, err := Dial(context.Background(), Config{BaseURL: "http://127.0.0.1:1", Codec: "g722"})
	require.ErrorContains(t, err, "unknown codec")
}
