package speech

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

const numbersRaw = "/usr/share/pocketsphinx/test/data/numbers.raw"

// withNoise returns pcm with white noise mixed in at snrDB, from a fixed seed.
func withNoise(pcm []float32, snrDB float64, seed uint64) []float32 {
	var p float64
	for _, v := range pcm {
		p += float64(v) * float64(v)
	}
	p /= float64(len(pcm))
	sigma := math.Sqrt(p / math.Pow(10, snrDB/10))
	r := rand.New(rand.NewPCG(seed, seed))
	out := make([]float32, len(pcm))
	for i, v := range pcm {
		out[i] = v + float32(r.NormFloat64()*sigma)
	}
	return out
}

// The same audio gives the same transcript whatever the pooled decoder heard before: the front
// end's noise estimate and the live cepstral mean carried over between utterances, so a noisy
// clip decoded after another clip came out differently (issue 26).
func TestASRDeterministicAcrossRequests(t *testing.T) {
	a := newTestASR(t, 1) // one decoder: every request reuses it
	ctx := context.Background()
	noisy := withNoise(loadRaw(t, goforwardRaw), 5, 26)
	other := loadRaw(t, numbersRaw)

	first, err := a.Transcribe(ctx, noisy)
	require.NoError(t, err)
	for _, clip := range [][]float32{noisy, other, noisy, other, other} {
		_, err := a.Transcribe(ctx, clip)
		require.NoError(t, err)
		got, err := a.Transcribe(ctx, noisy)
		require.NoError(t, err)
		require.Equal(t, first, got, "the noisy clip's transcript changed with what came before")
	}

	// A stream (one session) starts from the same state too, and its first utterance matches.
	s, err := a.NewStream(ctx)
	require.NoError(t, err)
	defer s.Close()
	for off := 0; off < len(noisy); off += 1600 {
		require.NoError(t, s.Write(noisy[off:min(off+1600, len(noisy))]))
	}
	got, err := s.Finish()
	require.NoError(t, err)
	require.Equal(t, first, got)
}
