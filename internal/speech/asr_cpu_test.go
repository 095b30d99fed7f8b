package speech

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestASRUtteranceCPU: the stream counts the decoder's CPU time per utterance: it grows with
// the audio decoded and with finishing, stays readable after Finish, and starts again at the
// next utterance.
func TestASRUtteranceCPU(t *testing.T) {
	a := newTestASR(t, 1)
	pcm := loadRaw(t, goforwardRaw)
	s, err := a.NewStream(context.Background())
	require.NoError(t, err)
	defer s.Close()
	require.Zero(t, s.UtteranceCPU())
	require.NoError(t, s.Write(pcm[:len(pcm)/2]))
	half := s.UtteranceCPU()
	require.Positive(t, half)
	require.NoError(t, s.Write(pcm[len(pcm)/2:]))
	_, _, err = s.FinishLogprobs()
	require.NoError(t, err)
	whole := s.UtteranceCPU()
	require.Greater(t, whole, half)
	// Far below the audio's duration (2.8 s): pocketsphinx decodes faster than real time.
	require.Less(t, whole, 2800*time.Millisecond)
	require.NoError(t, s.Write(pcm[:1600]))
	require.Less(t, s.UtteranceCPU(), whole, "a new utterance counts from zero")
}
