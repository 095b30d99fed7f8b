package speech

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
)

// speechBounds finds the first and last 10 ms frame whose energy is within 25 dB of the loudest
// frame: the truth the VAD is measured against.
func speechBounds(pcm []float32, rate int) (startMs, endMs int64) {
	const frameMs = 10
	n := rate * frameMs / 1000
	var db []float64
	peak := math.Inf(-1)
	for off := 0; off+n <= len(pcm); off += n {
		e := 0.0
		for _, v := range pcm[off : off+n] {
			e += float64(v) * float64(v)
		}
		d := 10 * math.Log10(e/float64(n)+1e-12)
		db = append(db, d)
		peak = max(peak, d)
	}
	first, last := -1, -1
	for i, d := range db {
		if d >= peak-25 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	return int64(first * frameMs), int64((last + 1) * frameMs)
}

func TestVADPaddedSpeech(t *testing.T) {
	clip := loadRaw(t, goforwardRaw)
	pad := make([]float32, 16000)
	pcm := append(append(append([]float32{}, pad...), clip...), pad...)
	truthStart, truthEnd := speechBounds(pcm, 16000)
	t.Logf("truth from the energy envelope: %d–%d ms", truthStart, truthEnd)

	tests := []struct {
		name    string
		cfg     VADConfig
		padding int64
	}{
		{"realtime defaults", VADConfig{Threshold: 0.5, PrefixPaddingMs: 300, SilenceDurationMs: 500}, 300},
		{"mode 0 no padding", VADConfig{Mode: 0, PrefixPaddingMs: -1}, 0},
		{"mode 1", VADConfig{Mode: 1}, DefaultPrefixPaddingMs},
		// Mode 3 is left out: it drops the soft tail of "meters" and stops 170 ms early on this clip.
		{"mode 2 short silence", VADConfig{Mode: 2, SilenceDurationMs: 200}, DefaultPrefixPaddingMs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := NewVAD(tt.cfg)
			require.NoError(t, err)
			defer v.Close()
			var got []VADEvent
			var lastEnd int64 // TrailingSilence's speech end while the segment was open
			// Odd chunk sizes exercise the frame remainder kept between calls.
			for off := 0; off < len(pcm); off += 1234 {
				ev, err := v.Process(pcm[off:min(off+1234, len(pcm))])
				require.NoError(t, err)
				got = append(got, ev...)
				if sil, end := v.TrailingSilence(); v.InSpeech() {
					require.Less(t, sil, v.cfg.SilenceDurationMs)
					lastEnd = end
				} else {
					require.Zero(t, sil)
				}
			}
			t.Logf("mode %d events %v", v.Mode(), got)
			require.Len(t, got, 2, "one segment")
			require.Equal(t, SpeechStarted, got[0].Kind)
			require.Equal(t, SpeechStopped, got[1].Kind)
			require.InDelta(t, truthStart, got[0].AtMs+tt.padding, 100, "start (padding %d ms)", tt.padding)
			// The stop may come up to 120 ms early: WebRTC calls the −45 and −39 dBFS frames of
			// "meters" unvoiced, and the −52 dBFS frame it does call voiced is 31 dB under the
			// peak, too weak to hold the segment (holdMarginDB).
			require.InDelta(t, truthEnd, got[1].AtMs, 120, "stop")
			require.Equal(t, lastEnd, got[1].AtMs, "the pause's speech end is the stop's audio_end_ms")
			require.False(t, v.InSpeech())
		})
	}
}

func TestVADReset(t *testing.T) {
	clip := loadRaw(t, goforwardRaw)
	v, err := NewVAD(VADConfig{})
	require.NoError(t, err)
	defer v.Close()
	_, err = v.Process(clip[:16000])
	require.NoError(t, err)
	require.True(t, v.InSpeech())
	v.Reset()
	require.False(t, v.InSpeech())
	ev, err := v.Process(make([]float32, 16000))
	require.NoError(t, err)
	require.Empty(t, ev)
}

func TestVADBadInput(t *testing.T) {
	tests := []struct {
		name string
		cfg  VADConfig
		err  error
	}{
		{"rate 44100", VADConfig{SampleRate: 44100}, audio.ErrUnsupportedRate},
		{"rate 24000", VADConfig{SampleRate: 24000}, audio.ErrUnsupportedRate},
		{"mode 4", VADConfig{Mode: 4}, ErrInvalidConfig},
		{"mode -1", VADConfig{Mode: -1}, ErrInvalidConfig},
		{"threshold 1.5", VADConfig{Threshold: 1.5}, ErrInvalidConfig},
		{"threshold NaN", VADConfig{Threshold: math.NaN()}, ErrInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewVAD(tt.cfg)
			require.ErrorIs(t, err, tt.err)
		})
	}
	v, err := NewVAD(VADConfig{Threshold: 0.9})
	require.NoError(t, err)
	require.Equal(t, 3, v.Mode())
	_, err = v.Process([]float32{0, float32(math.NaN())})
	require.ErrorIs(t, err, audio.ErrNonFinite)
	ev, err := v.Process(nil)
	require.NoError(t, err)
	require.Empty(t, ev)
	v.Close()
	v.Close()
	_, err = v.Process([]float32{0})
	require.ErrorIs(t, err, ErrClosed)
}

func TestVADProcessDoesNotAllocate(t *testing.T) {
	clip := loadRaw(t, goforwardRaw)
	v, err := NewVAD(VADConfig{})
	require.NoError(t, err)
	defer v.Close()
	off := 0
	allocs := testing.AllocsPerRun(100, func() {
		if off+1600 > len(clip) {
			off = 0
		}
		if _, err := v.Process(clip[off : off+1600]); err != nil {
			t.Fatal(err)
		}
		off += 1600
	})
	require.Zero(t, allocs)
}

// A turn ends one silence window after its words, whatever came before it: a session resets
// its VAD when a reply starts and then hears seconds of digital silence (a client's padding)
// or a microphone's noise floor before the next utterance. WebRTC adapts its noise models on
// every frame it is given, so some stretches of zeros left it calling a clip's room-noise tail
// (−46 to −64 dBFS) speech for another 450–720 ms, and a −60 dBFS noise floor held numbers.raw
// 700 ms past its words. The stop is checked against the clip's energy envelope (within 25 dB
// of its peak) over 60 lengths of silence, each at a different frame phase.
func TestVADEndsOnTimeAfterSilence(t *testing.T) {
	const rate = 16000
	clips := []string{goforwardRaw, numbersRaw, "/usr/share/pocketsphinx/test/data/something.raw"}
	for _, floor := range []struct {
		name string
		rms  float64 // of the noise floor, full scale; 0: digital silence
	}{{"digital silence", 0}, {"noise floor -60 dBFS", 0.001}} {
		for _, path := range clips {
			t.Run(floor.name+"/"+path[strings.LastIndex(path, "/")+1:], func(t *testing.T) {
				t.Parallel()
				clip := loadRaw(t, path)
				_, truthEnd := speechBounds(clip, rate)
				prior := loadRaw(t, goforwardRaw)
				r := rand.New(rand.NewPCG(7, 7))
				noise := func(n int) []float32 {
					out := make([]float32, n)
					for i := range out {
						out[i] = float32(r.NormFloat64() * floor.rms)
					}
					return out
				}
				v, err := NewVAD(VADConfig{Threshold: 0.5, PrefixPaddingMs: 300, SilenceDurationMs: 500})
				require.NoError(t, err)
				defer v.Close()
				var late []int64
				for k := range 60 {
					// the previous utterance and its turn's end, then the reply: a reset and silence
					_, err := v.Process(append(append([]float32{}, prior...), noise(rate)...))
					require.NoError(t, err)
					v.Reset()
					lead := rate * (300 + 97*k) / 1000
					heard := append(noise(lead), clip...)
					for i := range clip {
						heard[lead+i] += noise(1)[0]
					}
					heard = append(heard, noise(rate)...)
					var stop int64 = -1
					for off := 0; off < len(heard) && stop < 0; off += rate / 10 {
						evs, err := v.Process(heard[off:min(off+rate/10, len(heard))])
						require.NoError(t, err)
						for _, ev := range evs {
							if ev.Kind == SpeechStopped {
								stop = ev.AtMs - int64(lead*1000/rate)
							}
						}
					}
					require.GreaterOrEqual(t, stop, int64(0), "silence %d ms: no stop", lead*1000/rate)
					if stop > truthEnd+100 {
						late = append(late, stop-truthEnd)
					}
					v.Reset()
				}
				require.Empty(t, late, "stops after the words' end %d ms, by ms", truthEnd)
			})
		}
	}
}
