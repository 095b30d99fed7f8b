// Package engine is `omniserve bench engine`: the server's engine (internal/gpu's Runner, as
// internal/server builds it) against a bare llama.cpp loop in the same process: single and
// 8-sequence decode throughput, batching speedup and efficiency, bridge overhead, TTFT and TPOT.
package engine

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/gpu"
)

// Options are the measurement's shape.
type Options struct {
	Tokens   int         // decode steps per measurement
	Prompt   int         // prompt tokens per sequence for the decode measurements
	Rounds   int         // measurement rounds; the best is kept (the CPU may be shared)
	TTFTReps int         // TTFT/TPOT repetitions (128-token prompt, 64 tokens)
	Meter    bench.Meter // progress of the measurements; nil shows none
}

// Run measures r, and the bare loop on the same model and settings (cfg), and returns the figures.
// Per-round lines go to out.
func Run(ctx context.Context, r *gpu.Runner, cfg gpu.Config, o Options, out io.Writer) ([]bench.Figure, error) {
	var eng1, eng8, bare1, bare8 []float64
	// Four decode measurements per round, then one TTFT/TPOT measurement per repetition.
	prog := o.Meter.Start("engine", 4*o.Rounds+o.TTFTReps, "measurements")
	defer prog.Done()
	for round := range o.Rounds {
		b1, err := gpu.BareDecodeBench(ctx, cfg, 1, o.Prompt, o.Tokens)
		if err != nil {
			return nil, err
		}
		prog.Add(1)
		e1, err := engineDecode(ctx, r, 1, o.Prompt, o.Tokens)
		if err != nil {
			return nil, err
		}
		prog.Add(1)
		b8, err := gpu.BareDecodeBench(ctx, cfg, 8, o.Prompt, o.Tokens)
		if err != nil {
			return nil, err
		}
		prog.Add(1)
		e8, err := engineDecode(ctx, r, 8, o.Prompt, o.Tokens)
		if err != nil {
			return nil, err
		}
		prog.Add(1)
		fmt.Fprintf(out, "round %d: bare1=%.2f engine1=%.2f bare8=%.2f engine8=%.2f tok/s\n", round, b1.TokS, e1, b8.TokS, e8)
		eng1, eng8 = append(eng1, e1), append(eng8, e8)
		bare1, bare8 = append(bare1, b1.TokS), append(bare8, b8.TokS)
	}
	ttft, tpot, err := latency(ctx, r, o.TTFTReps, prog)
	if err != nil {
		return nil, err
	}
	best := func(name, def string, v []float64) bench.Figure {
		return bench.Figure{Name: name, Unit: "tok/s", Definition: def + "; one sample per round, the best is printed",
			Samples: v, Keys: []bench.Stat{bench.Max}, Digits: 2}
	}
	figs := []bench.Figure{
		best("engine_single_decode_tok_s", "engine, 1 sequence: tokens decoded while it decodes / that interval", eng1),
		best("engine_batch8_decode_tok_s", "engine, 8 concurrent sequences: tokens decoded while all 8 decode / that interval", eng8),
		best("bare_single_decode_tok_s", "bare llama.cpp loop, 1 sequence", bare1),
		best("bare_batch8_decode_tok_s", "bare llama.cpp loop, 8 sequences in one batch per step", bare8),
	}
	e1, e8, b1, b8 := figs[0].Summary(bench.Max), figs[1].Summary(bench.Max), figs[2].Summary(bench.Max), figs[3].Summary(bench.Max)
	speedup, bareSpeedup := e8/e1, b8/b1
	figs = append(figs,
		bench.One("batching_speedup_8", "ratio", "best engine 8-sequence rate / best engine 1-sequence rate", speedup, 3),
		bench.One("bare_batching_speedup_8", "ratio", "the same for the bare loop: the physical limit", bareSpeedup, 3),
		bench.One("batching_efficiency_8", "ratio", "batching_speedup_8 / bare_batching_speedup_8", speedup/bareSpeedup, 3),
		bench.One("bridge_overhead_pct", "%", "(bare − engine) / bare × 100, 1 sequence, best rounds", (b1-e1)/b1*100, 2),
		bench.One("bridge_overhead_batch8_pct", "%", "(bare − engine) / bare × 100, 8 sequences, best rounds", (b8-e8)/b8*100, 2),
		bench.Figure{Name: "ttft_ms", Unit: "ms", Definition: "engine: Append of a 128-token prompt → first generated token, fresh sequence",
			Samples: ttft, Keys: []bench.Stat{bench.P50}, Digits: 1},
		bench.Figure{Name: "tpot_ms", Unit: "ms", Definition: "engine: time per output token over 64 generated tokens",
			Samples: tpot, Keys: []bench.Stat{bench.P50}, Digits: 2},
	)
	return figs, nil
}

// engineDecode runs n sequences (promptLen-token prompts incl. BOS) generating tokens+1 tokens
// each, greedy, and returns the aggregate decode rate over the interval in which all n
// sequences were decoding. Both measurements ignore EOS, as vLLM's benchmarks do: they need the
// lengths they ask for, where a model (the dummy ones included) would end a reply sooner.
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
		wg.Go(func() {
			if _, errs[i] = s.Append(ctx, prompt); errs[i] != nil {
				return
			}
			_, errs[i] = s.Generate(ctx, gpu.GenerateOptions{MaxTokens: tokens + 1, IgnoreEOS: true}, func(gpu.Piece) error {
				times[i] = append(times[i], time.Now())
				return nil
			})
		})
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
// generated tokens, reps times on fresh sequences.
func latency(ctx context.Context, r *gpu.Runner, reps int, prog bench.Progress) (ttftMs, tpotMs []float64, err error) {
	prompt, err := r.BenchPrompt(127) // + BOS = 128
	if err != nil {
		return nil, nil, err
	}
	for range reps {
		s, err := r.Open(ctx, gpu.SeqOptions{})
		if err != nil {
			return nil, nil, err
		}
		t0 := time.Now()
		var first time.Time
		_, err = s.Append(ctx, prompt)
		var res gpu.GenerateResult
		if err == nil {
			res, err = s.Generate(ctx, gpu.GenerateOptions{MaxTokens: 64, IgnoreEOS: true}, func(gpu.Piece) error {
				if first.IsZero() {
					first = time.Now()
				}
				return nil
			})
		}
		s.Close()
		if err != nil {
			return nil, nil, err
		}
		ttftMs = append(ttftMs, float64(first.Sub(t0))/1e6)
		tpotMs = append(tpotMs, res.Stats.TPOTMs)
		prog.Add(1)
	}
	return ttftMs, tpotMs, nil
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
