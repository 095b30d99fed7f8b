package speech

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
)

func rms(pcm []float32) float64 {
	var p float64
	for _, v := range pcm {
		p += float64(v) * float64(v)
	}
	return math.Sqrt(p / float64(len(pcm)))
}

// The preprocessor takes the noise down where there is no speech and keeps the speech.
func TestDenoiserSuppressesNoise(t *testing.T) {
	speech := loadRaw(t, goforwardRaw)
	lead := make([]float32, 2*audio.ASRSampleRate) // 2 s of noise only, then the speech
	noisy := withNoise(append(lead, speech...), 10, 7)
	// withNoise scales to the signal's mean power; the noise-only lead gets the same noise.
	for _, mode := range []string{NoiseNearField, NoiseFarField} {
		t.Run(mode, func(t *testing.T) {
			d, err := NewDenoiser(mode)
			require.NoError(t, err)
			defer d.Close()
			var out []float32
			for off := 0; off < len(noisy); off += 1000 { // odd chunks: frames span calls
				out = append(out, d.Process(noisy[off:min(off+1000, len(noisy))])...)
			}
			out = append(out, d.Flush()...)
			require.Len(t, out, len(noisy))
			// The last second of the lead: the noise estimate has settled by then.
			nIn, nOut := rms(noisy[audio.ASRSampleRate:len(lead)]), rms(out[audio.ASRSampleRate:len(lead)])
			sIn, sOut := rms(noisy[len(lead):]), rms(out[len(lead):])
			t.Logf("noise rms %.4f -> %.4f (%.1f dB), speech+noise rms %.4f -> %.4f",
				nIn, nOut, 20*math.Log10(nOut/nIn), sIn, sOut)
			require.Less(t, nOut, nIn/3, "noise down by more than 9.5 dB")
			require.Greater(t, sOut/nOut, 2*sIn/nIn, "the speech stands out more than before")
		})
	}
}

func TestDenoiserBadMode(t *testing.T) {
	for _, mode := range []string{"", "near", "NEAR_FIELD"} {
		_, err := NewDenoiser(mode)
		require.True(t, errors.Is(err, ErrInvalidConfig), "%q: %v", mode, err)
	}
}

// wordErrors is the word-level edit distance between ref and hyp.
func wordErrors(ref, hyp []string) int {
	prev := make([]int, len(hyp)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ref); i++ {
		cur := make([]int, len(hyp)+1)
		cur[0] = i
		for j := 1; j <= len(hyp); j++ {
			sub := prev[j-1]
			if ref[i-1] != hyp[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev = cur
	}
	return prev[len(hyp)]
}

// BenchmarkDenoiseWordAccuracy measures word accuracy (1 - WER) of the ASR on the librivox
// clips and goforward with white noise mixed in at 5 and 10 dB SNR, without noise reduction
// and with near_field / far_field. Run:
//
//	go test -run '^$' -bench BenchmarkDenoiseWordAccuracy -benchtime 1x ./internal/speech/
func BenchmarkDenoiseWordAccuracy(b *testing.B) {
	const dir = "/usr/share/pocketsphinx/test/data/"
	needFile(b, dir+"librivox/transcription", "pocketsphinx-testdata")
	tr, err := os.ReadFile(dir + "librivox/transcription")
	require.NoError(b, err)
	type clip struct {
		pcm []float32
		ref []string
	}
	clips := []clip{{loadRaw(b, goforwardRaw), strings.Fields(goforwardTxt)}}
	for line := range strings.Lines(string(tr)) {
		text, id, ok := strings.Cut(strings.TrimSpace(line), " (")
		if !ok {
			continue
		}
		wav, err := os.ReadFile(dir + "librivox/" + strings.TrimSuffix(id, ")") + ".wav")
		require.NoError(b, err)
		pcm, _, err := audio.DecodeWAV(wav)
		require.NoError(b, err)
		words := strings.Fields(strings.NewReplacer("<s>", "", "</s>", "").Replace(text))
		clips = append(clips, clip{pcm, words})
	}
	a := newTestASR(b, 1)
	for _, snr := range []float64{5, 10} {
		for _, mode := range []string{"none", NoiseNearField, NoiseFarField} {
			b.Run(fmt.Sprintf("snr=%gdB/%s", snr, mode), func(b *testing.B) {
				for range b.N {
					words, errs := 0, 0
					for i, c := range clips {
						pcm := withNoise(c.pcm, snr, uint64(100+i))
						if mode != "none" {
							d, err := NewDenoiser(mode)
							require.NoError(b, err)
							pcm = append(d.Process(pcm), d.Flush()...)
							d.Close()
						}
						hyp, err := a.Transcribe(context.Background(), pcm)
						require.NoError(b, err)
						words += len(c.ref)
						errs += wordErrors(c.ref, strings.Fields(hyp))
					}
					b.ReportMetric(100*(1-float64(errs)/float64(words)), "word_accuracy_%")
				}
			})
		}
	}
}
