// Package frontend is `omniserve bench speech`: the speech front end of the server (its ASR
// decoder pool and TTS voice: real-time factors, VAD cost per frame, how many concurrent
// real-time streams ASR + VAD keep up with) and the spoken-turn latency of its pipeline (VAD
// endpoint → first audio out of the talker).
package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/benchreport"
	"github.com/omniserve/omniserve/internal/speech"
)

// FrontOptions shape the front-end measurement.
type FrontOptions struct {
	MaxStreams int           // largest stream count tried
	Trial      time.Duration // length of each real-time trial
	MaxLag     time.Duration // a stream keeps up if no 100 ms chunk finishes later than this after it arrived
	Meter      bench.Meter   // progress of the steps; nil shows none
}

// ReadClip reads 16 kHz s16le mono speech.
func ReadClip(path string) ([]float32, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading clip (Debian package pocketsphinx-testdata): %w", err)
	}
	return audio.PCM16BytesToFloat32(nil, raw[:len(raw)&^1])
}

// Front measures asr and tts on clip and returns the figures; progress lines go to out.
func Front(ctx context.Context, asr *speech.ASR, tts *speech.TTS, clip []float32, o FrontOptions, out io.Writer) ([]bench.Figure, error) {
	clipSec := float64(len(clip)) / audio.ASRSampleRate
	fmt.Fprintf(out, "machine: %s\n", CPUModel())
	// Steps: 3 ASR tries, 3 TTS tries, the VAD passes, one trial per stream count (the last
	// trials are skipped once one fails to keep up).
	counts := streamCounts(o.MaxStreams)
	prog := o.Meter.Start("speech front", 7+len(counts), "steps")
	defer prog.Done()

	// ASR: whole-clip transcription on one stream, 3 tries (the first warms caches).
	var asrRTF []float64
	var text string
	for range 3 {
		start := time.Now()
		var err error
		if text, err = asr.Transcribe(ctx, clip); err != nil {
			return nil, err
		}
		asrRTF = append(asrRTF, time.Since(start).Seconds()/clipSec)
		prog.Add(1)
	}
	fmt.Fprintf(out, "asr: %.2f s clip, best RTF %.3f, transcript %q\n", clipSec, slices.Min(asrRTF), text)

	// TTS: a fixed paragraph, 3 tries.
	const para = "Hello, thanks for calling. The weather today is mostly sunny with a light breeze, " +
		"and the temperature should reach twenty three degrees by the afternoon. Is there anything else I can help you with?"
	var ttsRTF []float64
	var ttsSec float64
	for range 3 {
		start := time.Now()
		pcm, err := tts.Synthesize(ctx, para)
		if err != nil {
			return nil, err
		}
		d := time.Since(start)
		ttsSec = float64(len(pcm)) / float64(tts.OutputRate())
		ttsRTF = append(ttsRTF, d.Seconds()/ttsSec)
		prog.Add(1)
	}
	fmt.Fprintf(out, "tts: %.2f s of %d Hz speech, best RTF %.4f\n", ttsSec, tts.OutputRate(), slices.Min(ttsRTF))

	// VAD: 100 passes over the clip in 100 ms chunks.
	vad, err := speech.NewVAD(speech.VADConfig{Threshold: 0.5})
	if err != nil {
		return nil, err
	}
	const vadPasses = 100
	start := time.Now()
	for range vadPasses {
		for off := 0; off < len(clip); off += 1600 {
			if _, err := vad.Process(clip[off:min(off+1600, len(clip))]); err != nil {
				vad.Close()
				return nil, err
			}
		}
	}
	frames := vadPasses * len(clip) / 480
	vadUs := float64(time.Since(start).Microseconds()) / float64(frames)
	vad.Close()
	prog.Add(1)

	// Real-time streams: increase N until a trial fails.
	best := 0
	var lagsMs []float64
	for _, n := range counts {
		r, err := realtimeTrial(ctx, asr, clip, n, o)
		if err != nil {
			return nil, err
		}
		prog.Add(1)
		fmt.Fprintf(out, "streams=%d keep_up=%v max_lag_ms=%.0f p99_lag_ms=%.0f finals=%d exact=%d decoders=%d rss_mib=%d\n",
			n, r.ok, ms(r.maxLag), benchreport.Quantile(r.lagsMs, 99), r.finals, r.exact, asr.Decoders(), rssMiB())
		if !r.ok {
			break
		}
		best, lagsMs = n, r.lagsMs
	}
	return []bench.Figure{
		{Name: "asr_rtf", Unit: "ratio", Samples: asrRTF, Keys: []bench.Stat{bench.Min}, Digits: 3,
			Definition: "ASR time / audio time, whole clip on one stream; 3 tries, the best is printed"},
		{Name: "tts_rtf", Unit: "ratio", Samples: ttsRTF, Keys: []bench.Stat{bench.Min}, Digits: 4,
			Definition: "TTS time / audio time of a fixed paragraph; 3 tries, the best is printed"},
		bench.One("vad_us_per_frame", "us", "VAD time per 30 ms frame, fed in 100 ms chunks, 100 passes over the clip", vadUs, 2),
		bench.One("realtime_streams", "streams", "largest N of concurrent streams (VAD + streaming ASR at real-time pace) where no 100 ms chunk finishes later than --max-lag after it arrived", float64(best), 0),
		{Name: "realtime_streams_lag_ms", Unit: "ms", Samples: lagsMs,
			Definition: "at the realtime_streams step: each chunk's finish − its arrival"},
	}, nil
}

func streamCounts(maxN int) []int {
	out := []int{1, 2, 4}
	for n := 6; n <= maxN; n += 2 {
		out = append(out, n)
	}
	return slices.DeleteFunc(out, func(n int) bool { return n > maxN })
}

type trialResult struct {
	ok            bool
	maxLag        time.Duration
	lagsMs        []float64
	finals, exact int
}

// realtimeTrial runs n streams; each feeds the clip followed by 0.7 s of silence, looped, in
// 100 ms chunks at real-time pace through VAD and streaming ASR (Write and Partial every chunk,
// Finish at each VAD end of speech), the work the thinker stage does per duplex session.
func realtimeTrial(ctx context.Context, asr *speech.ASR, clip []float32, n int, o FrontOptions) (trialResult, error) {
	loop := append(slices.Clone(clip), make([]float32, 11200)...)
	const chunk = 1600
	chunks := int(o.Trial / (100 * time.Millisecond))

	streams := make([]*speech.ASRStream, n)
	for i := range streams {
		s, err := asr.NewStream(ctx)
		if err != nil {
			return trialResult{}, err
		}
		defer s.Close()
		streams[i] = s
	}
	var (
		mu     sync.Mutex
		lags   []time.Duration
		res    trialResult
		errs   []error
		wg     sync.WaitGroup
		origin = time.Now().Add(50 * time.Millisecond)
	)
	for i, s := range streams {
		wg.Go(func() {
			vad, err := speech.NewVAD(speech.VADConfig{Threshold: 0.5})
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			defer vad.Close()
			// Stagger streams in time and in the clip so utterance ends do not line up.
			begin := origin.Add(time.Duration(i) * 100 * time.Millisecond / time.Duration(n))
			pos := (i * 7 * chunk) % len(loop) / chunk * chunk
			var local []time.Duration
			finals, exact := 0, 0
			for k := range chunks {
				due := begin.Add(time.Duration(k+1) * 100 * time.Millisecond) // the chunk is complete at due
				if d := time.Until(due); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return
					}
				}
				c := loop[pos:min(pos+chunk, len(loop))]
				pos = (pos + chunk) % len(loop) / chunk * chunk
				ev, err := vad.Process(c)
				if err == nil {
					err = s.Write(c)
				}
				_ = s.Partial()
				for _, e := range ev {
					if e.Kind == speech.SpeechStopped && err == nil {
						var text string
						text, err = s.Finish()
						if errors.Is(err, audio.ErrEmptyAudio) {
							err = nil
						}
						finals++
						if text == "go forward ten meters" {
							exact++
						}
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				local = append(local, time.Since(due))
			}
			mu.Lock()
			lags = append(lags, local...)
			res.finals += finals
			res.exact += exact
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return trialResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return trialResult{}, err
	}
	for _, l := range lags {
		res.lagsMs = append(res.lagsMs, ms(l))
	}
	res.maxLag = slices.Max(lags)
	res.ok = res.maxLag <= o.MaxLag
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// CPUModel is the processor's model name from /proc/cpuinfo.
func CPUModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func rssMiB() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb / 1024
		}
	}
	return -1
}
