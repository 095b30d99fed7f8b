package speech

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
)

func TestASRGoForward(t *testing.T) {
	a := newTestASR(t, 2)
	pcm := loadRaw(t, goforwardRaw)
	ctx := context.Background()

	start := time.Now()
	got, err := a.Transcribe(ctx, pcm)
	require.NoError(t, err)
	require.Equal(t, goforwardTxt, got)
	t.Logf("transcribed %.2f s of audio in %v", float64(len(pcm))/audio.ASRSampleRate, time.Since(start))

	// Streaming in 100 ms chunks gives the same final text, partials along the way, and the
	// stream is reusable for a second utterance.
	s, err := a.NewStream(ctx)
	require.NoError(t, err)
	defer s.Close()
	for round := range 2 {
		var partials []string
		for off := 0; off < len(pcm); off += 1600 {
			require.NoError(t, s.Write(pcm[off:min(off+1600, len(pcm))]))
			if p := s.Partial(); p != "" {
				partials = append(partials, p)
			}
		}
		final, err := s.Finish()
		require.NoError(t, err, "round %d", round)
		require.Equal(t, goforwardTxt, final, "round %d", round)
		require.NotEmpty(t, partials, "round %d: no partial hypothesis", round)
		require.Empty(t, s.Partial(), "no utterance open after Finish")
	}
}

func TestASRPoolBounded(t *testing.T) {
	a := newTestASR(t, 1)
	ctx := context.Background()
	s1, err := a.NewStream(ctx)
	require.NoError(t, err)

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = a.NewStream(short)
	require.ErrorIs(t, err, context.DeadlineExceeded, "pool of 1 must not hand out a second decoder")

	s1.Close()
	s1.Close() // idempotent
	s2, err := a.NewStream(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, a.Decoders(), "the decoder is reused, not rebuilt")
	s2.Close()
}

func TestASRBadInput(t *testing.T) {
	a := newTestASR(t, 1)
	ctx := context.Background()
	_, err := a.Transcribe(ctx, nil)
	require.ErrorIs(t, err, audio.ErrEmptyAudio)
	_, err = a.Transcribe(ctx, []float32{0, float32(math.NaN())})
	require.ErrorIs(t, err, audio.ErrNonFinite)
	_, err = a.Transcribe(ctx, []float32{0, float32(math.Inf(-1))})
	require.ErrorIs(t, err, audio.ErrNonFinite)

	s, err := a.NewStream(ctx)
	require.NoError(t, err)
	_, err = s.Finish()
	require.ErrorIs(t, err, audio.ErrEmptyAudio)
	require.ErrorIs(t, s.Write([]float32{float32(math.Inf(1))}), audio.ErrNonFinite)
	s.Close()
	require.ErrorIs(t, s.Write([]float32{0}), ErrClosed)

	_, err = NewASR(ASRConfig{ModelDir: "/nonexistent"}, nil)
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "/nonexistent"), err.Error())

	a.Close()
	_, err = a.NewStream(ctx)
	require.True(t, errors.Is(err, ErrClosed), "%v", err)
}

func TestASRWriteDoesNotAllocate(t *testing.T) {
	a := newTestASR(t, 1)
	pcm := loadRaw(t, goforwardRaw)
	s, err := a.NewStream(context.Background())
	require.NoError(t, err)
	defer s.Close()
	chunk := pcm[:1600]
	require.NoError(t, s.Write(chunk))
	allocs := testing.AllocsPerRun(20, func() {
		if err := s.Write(chunk); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}

// TestASRWarm: Warm builds idle decoders up to n (never past PoolSize), so the next streams
// take a built decoder instead of waiting for a build.
func TestASRWarm(t *testing.T) {
	a := newTestASR(t, 3)
	require.Equal(t, 1, a.Decoders(), "NewASR builds one decoder")
	require.NoError(t, a.Warm(context.Background(), 2))
	require.Equal(t, 2, a.Decoders())
	require.NoError(t, a.Warm(context.Background(), 10))
	require.Equal(t, 3, a.Decoders(), "capped by PoolSize")
	var streams []*ASRStream
	for range 3 {
		s, err := a.NewStream(context.Background())
		require.NoError(t, err)
		streams = append(streams, s)
	}
	require.Equal(t, 3, a.Decoders(), "the streams took the warm decoders")
	for _, s := range streams {
		s.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, a.Warm(ctx, 1), "nothing to build")
}
