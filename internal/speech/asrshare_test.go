package speech

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
)

// TestASRSharedMatchesUnshared: decoders on the shared language model, dictionary and triphone
// map, restricted to the LM's words and decoding at the same time, give exactly the transcripts
// of decoders built as pocketsphinx alone builds them (own LM, all of cmudict), on every real
// recording of pocketsphinx-testdata. A shared LM score cache would make concurrent decoders
// read each other's backoffs and change these hypotheses.
func TestASRSharedMatchesUnshared(t *testing.T) {
	clips := realClips(t)
	names := make([]string, 0, len(clips))
	for n := range clips {
		names = append(names, n)
	}
	sort.Strings(names)
	ctx := context.Background()
	// A decoder's cepstral mean adapts across utterances and per ps_process_raw call, so every
	// stream feeds the clips in the same order and the same 100 ms chunks as the reference.
	decodeAll := func(a *ASR) (map[string]string, error) {
		s, err := a.NewStream(ctx)
		if err != nil {
			return nil, err
		}
		defer s.Close()
		out := map[string]string{}
		for _, n := range names {
			pcm := clips[n]
			for off := 0; off < len(pcm); off += 1600 {
				if err := s.Write(pcm[off:min(off+1600, len(pcm))]); err != nil {
					return nil, fmt.Errorf("%s: %w", n, err)
				}
			}
			if out[n], err = s.Finish(); err != nil {
				return nil, fmt.Errorf("%s: %w", n, err)
			}
		}
		return out, nil
	}

	ref, err := NewASR(ASRConfig{PoolSize: 1, unshared: true}, nil)
	require.NoError(t, err)
	want, err := decodeAll(ref)
	ref.Close()
	require.NoError(t, err)
	require.Equal(t, goforwardTxt, want["goforward.raw"])

	const streams = 3
	a := newTestASR(t, streams)
	require.NotNil(t, a.shared, "decoders must share the model with Debian's pocketsphinx 5prealpha")
	got := make([]map[string]string, streams)
	errs := make([]error, streams)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = decodeAll(a)
		}()
	}
	wg.Wait()
	for i := range streams {
		require.NoError(t, errs[i], "stream %d", i)
		require.Equal(t, want, got[i], "stream %d", i)
	}
	require.Equal(t, streams, a.Decoders())
	t.Logf("%d clips, %d concurrent streams, all transcripts equal to the unshared decoder's", len(names), streams)
}

// TestASRDecoderMemory measures the resident memory each decoder adds to the pool after it has
// decoded an utterance (issue 12, item 10: ≤ 40 MiB per session; unshared decoders took ~91).
func TestASRDecoderMemory(t *testing.T) {
	const n = 6
	a := newTestASR(t, n+1)
	pcm := loadRaw(t, goforwardRaw)
	ctx := context.Background()
	decode := func(s *ASRStream) {
		require.NoError(t, s.Write(pcm))
		got, err := s.Finish()
		require.NoError(t, err)
		require.Equal(t, goforwardTxt, got)
	}
	first, err := a.NewStream(ctx) // the decoder NewASR built, with the shared model
	require.NoError(t, err)
	defer first.Close()
	decode(first)
	before := rssKiB(t)
	for range n {
		s, err := a.NewStream(ctx)
		require.NoError(t, err)
		defer s.Close()
		decode(s)
	}
	after := rssKiB(t)
	per := float64(after-before) / 1024 / n
	t.Logf("rss %d -> %d KiB for %d decoders: %.1f MiB per decoder (shared model: %v)", before, after, n, per, a.shared != nil)
	require.LessOrEqual(t, per, 40.0)
}

func rssKiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			require.NoError(t, err)
			return kib
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// BenchmarkASRTranscribe compares decoding speed on the shared model (LM clone, restricted
// dictionary) with decoders built as pocketsphinx alone builds them.
func BenchmarkASRTranscribe(b *testing.B) {
	pcm := loadRaw(b, goforwardRaw)
	for _, tc := range []struct {
		name     string
		unshared bool
	}{{"shared", false}, {"unshared", true}} {
		b.Run(tc.name, func(b *testing.B) {
			a, err := NewASR(ASRConfig{PoolSize: 1, unshared: tc.unshared}, nil)
			require.NoError(b, err)
			defer a.Close()
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				got, err := a.Transcribe(ctx, pcm)
				require.NoError(b, err)
				require.Equal(b, goforwardTxt, got)
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)/(float64(len(pcm))/audio.ASRSampleRate), "rtf")
		})
	}
}
