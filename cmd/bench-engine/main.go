// Command bench-engine measures the engine (internal/gpu) against a bare llama.cpp loop in the
// same process: single and 8-sequence decode throughput, batching speedup and efficiency,
// bridge overhead, TTFT and TPOT. It ends with machine-readable key=value lines.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/omniserve/omniserve/internal/gpu"
	"go.uber.org/zap"
)

func main() {
	cfg := gpu.Config{}
	flag.StringVar(&cfg.Model, "model", "dummy:0.6b", "model: dummy:tiny, dummy:0.6b or a GGUF path")
	flag.StringVar(&cfg.CacheDir, "cache-dir", "", "dummy model cache (default $XDG_CACHE_HOME/omniserve)")
	flag.StringVar(&cfg.Device, "device", "cpu", "auto | cpu | cuda")
	flag.IntVar(&cfg.Threads, "threads", 2, "CPU threads")
	tokens := flag.Int("tokens", 64, "decode steps per measurement")
	prompt := flag.Int("prompt", 32, "prompt tokens per sequence for the decode measurements")
	rounds := flag.Int("rounds", 2, "measurement rounds (best kept: the CPU may be shared)")
	reps := flag.Int("ttft-reps", 5, "TTFT/TPOT repetitions (128-token prompt, 64 tokens)")
	flag.Parse()
	slog.SetLogLoggerLevel(slog.LevelWarn) // llama.cpp's own log
	cfg.ContextSize, cfg.MaxSequences, cfg.SeqContext, cfg.BatchSize = 4096, 8, 512, 512
	if err := run(context.Background(), cfg, *tokens, *prompt, *rounds, *reps); err != nil {
		fmt.Fprintln(os.Stderr, "bench-engine:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg gpu.Config, tokens, promptLen, rounds, reps int) error {
	log, _ := zap.NewDevelopment()
	defer log.Sync()
	r, err := gpu.Load(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer r.Close()
	info := r.Info()
	fmt.Printf("model=%s arch=%s devices=%v threads=%d cpus=%d\n", info.Name, info.Arch, info.Devices, cfg.Threads, runtime.NumCPU())

	var eng1, eng8, bare1, bare8 float64
	for round := range rounds {
		b1, err := gpu.BareDecodeBench(ctx, cfg, 1, promptLen, tokens)
		if err != nil {
			return err
		}
		e1, err := engineDecode(ctx, r, 1, promptLen, tokens)
		if err != nil {
			return err
		}
		b8, err := gpu.BareDecodeBench(ctx, cfg, 8, promptLen, tokens)
		if err != nil {
			return err
		}
		e8, err := engineDecode(ctx, r, 8, promptLen, tokens)
		if err != nil {
			return err
		}
		fmt.Printf("round %d: bare1=%.2f engine1=%.2f bare8=%.2f engine8=%.2f tok/s\n", round, b1.TokS, e1, b8.TokS, e8)
		eng1, eng8 = max(eng1, e1), max(eng8, e8)
		bare1, bare8 = max(bare1, b1.TokS), max(bare8, b8.TokS)
	}
	ttft, tpot, err := latency(ctx, r, reps)
	if err != nil {
		return err
	}
	speedup, bareSpeedup := eng8/eng1, bare8/bare1
	fmt.Printf("engine_single_decode_tok_s=%.2f\n", eng1)
	fmt.Printf("engine_batch8_decode_tok_s=%.2f\n", eng8)
	fmt.Printf("bare_single_decode_tok_s=%.2f\n", bare1)
	fmt.Printf("bare_batch8_decode_tok_s=%.2f\n", bare8)
	fmt.Printf("batching_speedup_8=%.3f\n", speedup)
	fmt.Printf("bare_batching_speedup_8=%.3f\n", bareSpeedup)
	fmt.Printf("batching_efficiency_8=%.3f\n", speedup/bareSpeedup)
	fmt.Printf("bridge_overhead_pct=%.2f\n", (bare1-eng1)/bare1*100)
	fmt.Printf("bridge_overhead_batch8_pct=%.2f\n", (bare8-eng8)/bare8*100)
	fmt.Printf("ttft_ms_p50=%.1f\n", ttft)
	fmt.Printf("tpot_ms_p50=%.2f\n", tpot)
	return nil
}

// engineDecode runs n sequences (promptLen-token prompts incl. BOS) generating tokens+1 tokens
// each, greedy, and returns the aggregate decode rate over the interval in which all n
// sequences were decoding.
func engineDecode(ctx context.Context, r *gpu.Runner, n, promptLen, tokens int) (float64, error) {
	prompt, err := r.BenchPrompt(promptLen - 1) // + BOS
	if err != nil {
		return 0, err
	}
	seqs := make([]*gpu.Sequence, n)
	for i := range seqs {
		if seqs[i], err = r.Open(ctx, gpu.SeqOptions{}); err != nil {
			return 0, err
		}
		defer seqs[i].Close()
	}
	times := make([][]time.Time, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range seqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, errs[i] = s.Append(ctx, prompt); errs[i] != nil {
				return
			}
			_, errs[i] = s.Generate(ctx, gpu.GenerateOptions{MaxTokens: tokens + 1}, func(gpu.Piece) error {
				times[i] = append(times[i], time.Now())
				return nil
			})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	// Count tokens inside [latest first token, earliest last token].
	start, end := times[0][0], times[0][len(times[0])-1]
	for _, ts := range times {
		start = later(start, ts[0])
		end = earlier(end, ts[len(ts)-1])
	}
	count := 0
	for _, ts := range times {
		for _, t := range ts {
			if t.After(start) && !t.After(end) {
				count++
			}
		}
	}
	return float64(count) / end.Sub(start).Seconds(), nil
}

// latency measures TTFT (Append of a 128-token prompt to the first token) and TPOT over 64
// generated tokens, reps times on fresh sequences, and returns the medians.
func latency(ctx context.Context, r *gpu.Runner, reps int) (ttftMs, tpotMs float64, err error) {
	prompt, err := r.BenchPrompt(127) // + BOS = 128
	if err != nil {
		return 0, 0, err
	}
	var ttfts, tpots []float64
	for range reps {
		s, err := r.Open(ctx, gpu.SeqOptions{})
		if err != nil {
			return 0, 0, err
		}
		t0 := time.Now()
		var first time.Time
		_, err = s.Append(ctx, prompt)
		var res gpu.GenerateResult
		if err == nil {
			res, err = s.Generate(ctx, gpu.GenerateOptions{MaxTokens: 64}, func(gpu.Piece) error {
				if first.IsZero() {
					first = time.Now()
				}
				return nil
			})
		}
		s.Close()
		if err != nil {
			return 0, 0, err
		}
		ttfts = append(ttfts, float64(first.Sub(t0))/1e6)
		tpots = append(tpots, res.Stats.TPOTMs)
	}
	return median(ttfts), median(tpots), nil
}

func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
