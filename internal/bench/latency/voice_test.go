package latency

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/testenv"
)

// TestVoicedWindows: the user's speech is audible where a 10 ms window's RMS reaches −40 dBFS.
// On the benchmark's clips that puts the end of goforward.raw after its final "s" (2360 ms;
// the server's WebRTC VAD ends the speech at 2340 ms) and the onset of numbers.raw at its first
// word (500 ms), not on the click at 312 ms that a per-sample rule takes for speech; a lone
// loud sample or silence is not speech.
func TestVoicedWindows(t *testing.T) {
	t.Parallel()
	msOf := func(i int) int { return i * 1000 / inRate }
	tests := []struct {
		file     string
		from, to int // ms
	}{
		{"/usr/share/pocketsphinx/test/data/goforward.raw", 510, 2360},
		{"/usr/share/pocketsphinx/test/data/numbers.raw", 500, 3560},
	}
	for _, tc := range tests {
		testenv.ReadFile(t, tc.file, "pocketsphinx-testdata")
		pcm, err := readRaw(tc.file)
		require.NoError(t, err)
		from, to := voiced(pcm)
		require.Equal(t, tc.from, msOf(from), "%s onset", tc.file)
		require.Equal(t, tc.to, msOf(to), "%s end", tc.file)
	}

	click := make([]float32, inRate)
	click[8000] = 0.5 // one loud sample: its window's RMS is 0.5/√160 ≈ −30 dBFS, audible
	quiet := make([]float32, inRate)
	quiet[8000] = 0.1 // ≈ −44 dBFS over the window: not audible
	from, to := voiced(quiet)
	require.Equal(t, [2]int{0, 0}, [2]int{from, to})
	require.Equal(t, -1, firstVoiced(make([]float32, inRate)), "silence")
	from, to = voiced(click)
	require.Equal(t, [2]int{8000, 8160}, [2]int{from, to})
}
