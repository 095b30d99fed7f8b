// Command bench-pipeline measures the spoken-turn latency of the cascaded pipeline: from the
// VAD endpoint of a spoken utterance (the arrival of the audio unit in which silence_duration_ms
// of silence completed) to the first PCM chunk out of stage 1, on real speech, the real ASR, VAD
// and TTS, and the dummy:tiny model. Audio is fed in 100 ms units, paced in real time by
// default. The last line is machine-readable: pipeline_first_audio_ms=<p50>.
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
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/speech"
	"github.com/omniserve/omniserve/internal/stage"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-pipeline:", err)
		os.Exit(1)
	}
}

type options struct {
	clip      string
	config    string
	model     string
	cacheDir  string
	runs      int
	maxTokens int
	realtime  bool
	threads   int
}

func run() error {
	var o options
	flag.StringVar(&o.clip, "clip", "/usr/share/pocketsphinx/test/data/goforward.raw", "16 kHz s16le mono speech clip")
	flag.StringVar(&o.config, "config", "configs/omni-cpu.yaml", "YAML file whose pipeline: section to use (\"\" = built-in defaults)")
	flag.StringVar(&o.model, "model", "dummy:tiny", "engine model")
	flag.StringVar(&o.cacheDir, "cache-dir", "", "dummy model cache (\"\" = engine default)")
	flag.IntVar(&o.runs, "runs", 7, "measured runs (after one warm-up run)")
	flag.IntVar(&o.maxTokens, "max-tokens", 32, "reply length")
	flag.BoolVar(&o.realtime, "realtime", true, "pace the 100 ms units in real time")
	flag.IntVar(&o.threads, "threads", 0, "engine threads (0 = the engine default: all cores but one)")
	flag.Parse()
	if o.runs < 1 {
		return errors.New("-runs must be at least 1")
	}
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
	// One second of trailing silence: enough for the default 500 ms endpoint.
	audio := append(clip, make([]float32, speech.ASRSampleRate)...)

	cfg := stage.DefaultPipelineConfig()
	if o.config != "" {
		if cfg, err = stage.LoadPipelineConfig(o.config); err != nil {
			return err
		}
	}
	log := zap.NewNop()
	eng, err := gpu.Load(ctx, gpu.Config{Model: o.model, CacheDir: o.cacheDir, Device: "cpu", Threads: o.threads}, log)
	if err != nil {
		return err
	}
	defer eng.Close()
	asr, err := speech.NewASR(speech.ASRConfig{PoolSize: 2}, log)
	if err != nil {
		return err
	}
	defer asr.Close()
	tts, err := speech.NewTTS(speech.TTSConfig{Voice: cfg.Talker.Voice, OutputRate: cfg.Talker.OutputRate})
	if err != nil {
		return err
	}
	defer tts.Close()
	p, err := stage.New(cfg, stage.Deps{Engine: eng, ASR: asr, TTS: tts}, log)
	if err != nil {
		return err
	}
	defer p.Close()

	fmt.Printf("machine: %d CPUs, GOMAXPROCS %d, %s; model %s; clip %.2f s + 1 s silence; %d-token replies; realtime=%v\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), o.model, float64(len(clip))/16000, o.maxTokens, o.realtime)
	var firstAudio, firstText, transcript []float64
	for i := range o.runs + 1 {
		r, err := oneRun(ctx, p, audio, o)
		if err != nil {
			return fmt.Errorf("run %d: %w", i, err)
		}
		label := fmt.Sprintf("run %d", i)
		if i == 0 {
			label = "warm-up"
		} else {
			firstAudio = append(firstAudio, r.audioMs)
			firstText = append(firstText, r.textMs)
			transcript = append(transcript, r.transcriptMs)
		}
		fmt.Printf("%s: endpoint->transcript %.1f ms, ->first text %.1f ms (engine ttft %.1f ms, %d prompt tokens), ->first audio %.1f ms (first chunk %.2f s of audio; heard %q)\n",
			label, r.transcriptMs, r.textMs, r.ttftMs, r.promptTokens, r.audioMs, r.firstChunkS, r.heard)
	}
	fmt.Printf("first audio over %d runs: p50 %.1f ms, min %.1f ms, max %.1f ms; first text p50 %.1f ms; transcript p50 %.1f ms\n",
		o.runs, median(firstAudio), slices.Min(firstAudio), slices.Max(firstAudio), median(firstText), median(transcript))
	fmt.Printf("pipeline_first_audio_ms=%.1f\n", median(firstAudio))
	return nil
}

type result struct {
	transcriptMs, textMs, audioMs float64
	firstChunkS                   float64
	heard                         string
	ttftMs                        float64
	promptTokens                  int
}

// timingSink notes when the speak decision's unit arrived and when the first outputs came.
type timingSink struct {
	mu                            sync.Mutex
	endpoint                      float64 // StageSubmitTS of the speak decision: its unit's arrival
	transcriptAt, textAt, audioAt float64
	heard                         string
	ttftMs                        float64 // engine: generation submit to first token
	promptTokens                  int
	firstChunkS                   float64
	finished                      chan struct{}
	once                          sync.Once
}

func (s *timingSink) OnOutput(m stage.OutputMessage) {
	now := metrics.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch m.Kind {
	case stage.Decision:
		if m.Decision == stage.DecisionSpeak && s.endpoint == 0 {
			s.endpoint = m.StageSubmitTS
		}
	case stage.Transcript:
		if s.transcriptAt == 0 {
			s.transcriptAt, s.heard = now, m.Text
		}
	case stage.Text:
		if s.textAt == 0 {
			s.textAt = now
		}
	case stage.Audio:
		if s.audioAt == 0 {
			s.audioAt = now
			s.firstChunkS = float64(len(m.Audio)) / float64(m.SampleRate)
		}
	case stage.Finished, stage.Error:
		s.once.Do(func() { close(s.finished) })
	}
}

func (s *timingSink) OnStageMetrics(m stage.StageMetricsMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.StageID == 0 && m.Metrics.NumTokensOut > 0 && s.ttftMs == 0 {
		s.ttftMs, s.promptTokens = m.Metrics.VllmTtftMs, m.Metrics.NumTokensIn
	}
}
func (s *timingSink) OnTransfer(stage.TransferEvent) {}

func oneRun(ctx context.Context, p *stage.Pipeline, audio []float32, o options) (result, error) {
	sink := &timingSink{finished: make(chan struct{})}
	d, err := p.OpenDuplex(ctx, stage.DuplexOptions{AutoResponse: true, WantAudio: true, MaxTokens: o.maxTokens}, sink)
	if err != nil {
		return result{}, err
	}
	defer d.Close()
	const unit = 1600 // 100 ms
	start := time.Now()
	for i, off := 0, 0; off < len(audio); i, off = i+1, off+unit {
		if o.realtime {
			if wait := time.Until(start.Add(time.Duration(i) * 100 * time.Millisecond)); wait > 0 {
				time.Sleep(wait)
			}
		}
		if err := d.AppendAudio(ctx, audio[off:min(off+unit, len(audio))]); err != nil {
			return result{}, err
		}
	}
	select {
	case <-sink.finished:
	case <-time.After(30 * time.Second):
		return result{}, errors.New("no Finished output within 30 s (no endpoint detected?)")
	case <-ctx.Done():
		return result{}, ctx.Err()
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.endpoint == 0 || sink.audioAt == 0 {
		return result{}, errors.New("no speak decision or no audio")
	}
	ms := func(t float64) float64 { return (t - sink.endpoint) * 1000 }
	return result{transcriptMs: ms(sink.transcriptAt), textMs: ms(sink.textAt), audioMs: ms(sink.audioAt),
		firstChunkS: sink.firstChunkS, heard: sink.heard, ttftMs: sink.ttftMs, promptTokens: sink.promptTokens}, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
