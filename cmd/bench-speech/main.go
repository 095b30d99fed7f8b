// Command bench-speech measures the speech front end on this machine: ASR and TTS real-time
// factors, VAD cost per 30 ms frame, and how many concurrent real-time 16 kHz streams the
// ASR+VAD front end keeps up with. The last lines are machine-readable key=value pairs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/omniserve/omniserve/internal/speech"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-speech:", err)
		os.Exit(1)
	}
}

type options struct {
	clip      string
	maxStream int
	trial     time.Duration
	maxLag    time.Duration
}

func run() error {
	var o options
	flag.StringVar(&o.clip, "clip", "/usr/share/pocketsphinx/test/data/goforward.raw", "16 kHz s16le mono speech clip")
	flag.IntVar(&o.maxStream, "max-streams", 16, "largest stream count to try")
	flag.DurationVar(&o.trial, "trial", 8*time.Second, "length of each real-time trial")
	flag.DurationVar(&o.maxLag, "max-lag", 400*time.Millisecond, "a stream keeps up if no 100 ms chunk finishes later than this after it arrived")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	raw, err := os.ReadFile(o.clip)
	if err != nil {
		return fmt.Errorf("reading clip: %w", err)
	}
	clip, err := speech.PCM16BytesToFloat32(nil, raw[:len(raw)&^1])
	if err != nil {
		return err
	}
	clipSec := float64(len(clip)) / 16000
	fmt.Printf("machine: %s, %d CPUs, GOMAXPROCS %d, %s\n", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())

	asr, err := speech.NewASR(speech.ASRConfig{PoolSize: o.maxStream}, nil)
	if err != nil {
		return err
	}
	defer asr.Close()

	// ASR: whole-clip transcription on one stream, best of 3 (the first run warms caches).
	var asrBest time.Duration
	var text string
	for i := range 3 {
		start := time.Now()
		if text, err = asr.Transcribe(ctx, clip); err != nil {
			return err
		}
		if d := time.Since(start); i == 0 || d < asrBest {
			asrBest = d
		}
	}
	asrRTF := asrBest.Seconds() / clipSec
	fmt.Printf("asr: %.2f s clip in %v, transcript %q\n", clipSec, asrBest.Round(time.Millisecond), text)

	// TTS: a fixed paragraph at 24 kHz, best of 3.
	tts, err := speech.NewTTS(speech.TTSConfig{})
	if err != nil {
		return err
	}
	defer tts.Close()
	const para = "Hello, thanks for calling. The weather today is mostly sunny with a light breeze, " +
		"and the temperature should reach twenty three degrees by the afternoon. Is there anything else I can help you with?"
	var ttsBest time.Duration
	var ttsSec float64
	for i := range 3 {
		start := time.Now()
		pcm, err := tts.Synthesize(ctx, para)
		if err != nil {
			return err
		}
		if d := time.Since(start); i == 0 || d < ttsBest {
			ttsBest = d
		}
		ttsSec = float64(len(pcm)) / float64(tts.OutputRate())
	}
	ttsRTF := ttsBest.Seconds() / ttsSec
	fmt.Printf("tts: %.2f s of 24 kHz speech in %v\n", ttsSec, ttsBest.Round(time.Millisecond))

	// VAD: 100 passes over the clip in 100 ms chunks.
	vad, err := speech.NewVAD(speech.VADConfig{Threshold: 0.5})
	if err != nil {
		return err
	}
	const vadPasses = 100
	start := time.Now()
	for range vadPasses {
		for off := 0; off < len(clip); off += 1600 {
			if _, err := vad.Process(clip[off:min(off+1600, len(clip))]); err != nil {
				return err
			}
		}
	}
	frames := vadPasses * len(clip) / 480
	vadUs := float64(time.Since(start).Microseconds()) / float64(frames)
	vad.Close()

	// Real-time streams: increase N until a trial fails.
	best := 0
	for _, n := range streamCounts(o.maxStream) {
		r, err := realtimeTrial(ctx, asr, clip, n, o)
		if err != nil {
			return err
		}
		fmt.Printf("streams=%d keep_up=%v max_lag_ms=%.0f p99_lag_ms=%.0f finals=%d exact=%d decoders=%d rss_mib=%d\n",
			n, r.ok, ms(r.maxLag), ms(r.p99Lag), r.finals, r.exact, asr.Decoders(), rssMiB())
		if !r.ok {
			break
		}
		best = n
	}

	fmt.Printf("asr_rtf=%.3f\n", asrRTF)
	fmt.Printf("tts_rtf=%.4f\n", ttsRTF)
	fmt.Printf("vad_us_per_frame=%.2f\n", vadUs)
	fmt.Printf("realtime_streams_2cores=%d\n", best)
	return nil
}

func streamCounts(maxN int) []int {
	out := []int{1, 2, 4}
	for n := 6; n <= maxN; n += 2 {
		out = append(out, n)
	}
	return slices.DeleteFunc(out, func(n int) bool { return n > maxN })
}

type trialResult struct {
	ok             bool
	maxLag, p99Lag time.Duration
	finals, exact  int
}

// realtimeTrial runs n streams; each feeds the clip followed by 0.7 s of silence, looped, in
// 100 ms chunks at real-time pace through VAD and streaming ASR (Write and Partial every chunk,
// Finish at each VAD end of speech), the work the thinker stage does per duplex session.
func realtimeTrial(ctx context.Context, asr *speech.ASR, clip []float32, n int, o options) (trialResult, error) {
	loop := append(slices.Clone(clip), make([]float32, 11200)...)
	const chunk = 1600
	chunks := int(o.trial / (100 * time.Millisecond))

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
		wg.Add(1)
		go func() {
			defer wg.Done()
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
						if errors.Is(err, speech.ErrEmptyAudio) {
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
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return trialResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return trialResult{}, err
	}
	slices.Sort(lags)
	res.maxLag = lags[len(lags)-1]
	res.p99Lag = lags[len(lags)*99/100]
	res.ok = res.maxLag <= o.maxLag
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func cpuModel() string {
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
