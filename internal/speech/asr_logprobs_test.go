package speech

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
)

func meanLogprob(lps []audio.WordLogprob) float64 {
	var s float64
	for _, lp := range lps {
		s += lp.Logprob
	}
	return s / float64(len(lps))
}

// include=logprobs: one posterior per transcript word, in order, each a finite natural log ≤ 0,
// the same for the same audio, and lower on audio the recognizer can barely hear.
func TestASRLogprobs(t *testing.T) {
	a := newTestASR(t, 1)
	ctx := context.Background()
	clean := loadRaw(t, goforwardRaw)
	noisy := withNoise(clean, 0, 26)

	check := func(name string, pcm []float32) (string, []audio.WordLogprob) {
		text, lps, err := a.TranscribeLogprobs(ctx, pcm, nil)
		require.NoError(t, err, name)
		plain, err := a.Transcribe(ctx, pcm)
		require.NoError(t, err, name)
		require.Equal(t, plain, text, "%s: asking for logprobs changed the transcript", name)
		words := strings.Fields(text)
		require.Len(t, lps, len(words), name)
		for i, lp := range lps {
			require.Equal(t, words[i], lp.Word, "%s word %d", name, i)
			require.False(t, math.IsNaN(lp.Logprob) || math.IsInf(lp.Logprob, 0), "%s word %d: %v", name, i, lp.Logprob)
			require.LessOrEqual(t, lp.Logprob, 0.0, "%s word %d", name, i)
		}
		again, lps2, err := a.TranscribeLogprobs(ctx, pcm, nil)
		require.NoError(t, err, name)
		require.Equal(t, text, again, name)
		require.Equal(t, lps, lps2, "%s: the posteriors changed for the same audio", name)
		t.Logf("%s: %q logprobs %v (mean %.3f)", name, text, lps, meanLogprob(lps))
		return text, lps
	}
	text, cleanLps := check("clean", clean)
	require.Equal(t, goforwardTxt, text)
	_, noisyLps := check("noisy 0 dB", noisy)
	require.NotEmpty(t, noisyLps, "the noisy clip must still give words to score")
	require.Less(t, meanLogprob(noisyLps), meanLogprob(cleanLps),
		"speech under noise must score a lower mean log posterior than clean speech")

	// A stream's FinishLogprobs gives the same as the one-shot call.
	s, err := a.NewStream(ctx)
	require.NoError(t, err)
	defer s.Close()
	for off := 0; off < len(clean); off += 1600 {
		require.NoError(t, s.Write(clean[off:min(off+1600, len(clean))]))
	}
	got, lps, err := s.FinishLogprobs()
	require.NoError(t, err)
	require.Equal(t, goforwardTxt, got)
	require.Equal(t, cleanLps, lps)
}

func TestParseWordProbs(t *testing.T) {
	for _, tc := range []struct {
		name, raw, text string
		want            []audio.WordLogprob
		err             string
	}{
		{name: "fillers and alternates", raw: "<s>\t0\t0\ngo\t3\t-0.5\n<sil>\t20\t-0.1\nthe(2)\t30\t-1.25\n[NOISE]\t40\t-2\n</s>\t50\t0\n",
			text: "go the", want: []audio.WordLogprob{{Word: "go", Logprob: -0.5}, {Word: "the", Logprob: -1.25}}},
		{name: "rounding above zero", raw: "go\t3\t1e-9\n", text: "go", want: []audio.WordLogprob{{Word: "go", Logprob: 0}}},
		{name: "not in lattice", raw: "go\t3\tnan\n", text: "go", want: []audio.WordLogprob{{Word: "go", Logprob: UnsupportedWordLogprob}}},
		{name: "infinite", raw: "go\t3\t-inf\n", text: "go", err: "not a number"},
		{name: "count differs", raw: "go\t3\t-1\n", text: "go on", err: "1 words"},
		{name: "word differs", raw: "go\t3\t-1\n", text: "no", err: `"go"`},
		{name: "bad line", raw: "go -1\n", text: "go", err: "want word"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseWordProbs(tc.raw, tc.text)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// BenchmarkASRLogprobs measures what include=logprobs adds per utterance: the lattice, its
// best-path and forward-backward passes (compare the two sub-benchmarks' ns/op).
func BenchmarkASRLogprobs(b *testing.B) {
	a, err := NewASR(ASRConfig{PoolSize: 1}, nil)
	require.NoError(b, err)
	defer a.Close()
	pcm := loadRaw(b, goforwardRaw)
	ctx := context.Background()
	for _, with := range []bool{false, true} {
		name := map[bool]string{false: "without", true: "with"}[with]
		b.Run(name, func(b *testing.B) {
			var finish time.Duration
			for b.Loop() {
				s, err := a.NewStream(ctx)
				require.NoError(b, err)
				require.NoError(b, s.Write(pcm))
				t0 := time.Now()
				if with {
					_, _, err = s.FinishLogprobs()
				} else {
					_, err = s.Finish()
				}
				finish += time.Since(t0)
				require.NoError(b, err)
				s.Close()
			}
			b.ReportMetric(float64(finish.Microseconds())/float64(b.N), "finish-µs/op")
		})
	}
}

// Issue 26: the transcript's frames count from the decoder's stream, the lattice's from the
// utterance's first searched frame; looked up unshifted, the words of an utterance after the
// decoder's first, or after dropped silence, missed their links and fell to the floor (−709.09).
// Clean speech after or before silence, or said twice, keeps posteriors near the clip's alone.
func TestASRLogprobsLongUtterance(t *testing.T) {
	a := newTestASR(t, 1)
	ctx := context.Background()
	clean := loadRaw(t, goforwardRaw)
	_, short, err := a.TranscribeLogprobs(ctx, clean, nil)
	require.NoError(t, err)

	silence := func(s float64) []float32 { return make([]float32, int(s*16000)) }
	for _, tc := range []struct {
		name string
		pcm  []float32
	}{
		{"0.5 s silence first", append(silence(0.5), clean...)},
		{"1 s silence first", append(silence(1), clean...)},
		{"1 s silence after", append(append([]float32{}, clean...), silence(1)...)},
		{"said twice", append(append([]float32{}, clean...), clean...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, lps, err := a.TranscribeLogprobs(ctx, tc.pcm, nil)
			require.NoError(t, err)
			require.NotEmpty(t, lps)
			t.Logf("%q logprobs %v", text, lps)
			for i, lp := range lps {
				require.Greater(t, lp.Logprob, -50.0, "word %d %q", i, lp.Word)
			}
			if text == goforwardTxt {
				for i, lp := range lps {
					require.InDelta(t, short[i].Logprob, lp.Logprob, 2.0, "word %d %q vs the unpadded clip", i, lp.Word)
				}
			}
		})
	}
}
