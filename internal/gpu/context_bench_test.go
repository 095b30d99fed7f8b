package gpu

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
)

// BenchmarkTokenByContext measures what one generated token costs with ctx tokens in its
// sequence's context (100: a short conversation; 900: the same with a tools declaration of
// three tools, issue 24), with flash attention on and off. Each iteration generates one token;
// the generation is rolled back every 64 tokens so the context stays where it was. Besides the
// wall time it reports cpu-ms/token (the process's CPU time, getrusage), which another
// program's load on the machine changes much less. OMNISERVE_BENCH_MODEL picks the model
// (default dummy:tiny; dummy:0.6b has a real model's shape).
func BenchmarkTokenByContext(b *testing.B) {
	model := os.Getenv("OMNISERVE_BENCH_MODEL")
	if model == "" {
		model = "dummy:tiny"
	}
	for _, fa := range []string{FlashAttentionOff, FlashAttentionOn} {
		b.Run("flash_attention="+fa, func(b *testing.B) {
			r, err := Load(context.Background(), Config{Model: model, CacheDir: testCacheDir, Device: "cpu", Threads: 1,
				ContextSize: 4096, MaxSequences: 2, SeqContext: 2048, FlashAttention: fa}, zap.NewNop())
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			for _, n := range []int{100, 900} {
				b.Run(fmt.Sprintf("ctx=%d", n), func(b *testing.B) { benchTokens(b, r, n) })
			}
		})
	}
}

func benchTokens(b *testing.B, r *Runner, n int) {
	ctx := context.Background()
	s, err := r.Open(ctx, SeqOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rng := testRNG()
	toks := make([]int, n)
	for i := range toks {
		toks[i] = 10 + rng.IntN(r.vocab-20)
	}
	if _, err := s.Append(ctx, toks); err != nil {
		b.Fatal(err)
	}
	mark := s.Mark()
	opts := GenerateOptions{MaxTokens: 64, Sampling: &Sampling{Temperature: 0.8, TopP: 0.95, Seed: 1}}
	done := 0
	var cpu time.Duration
	b.ResetTimer()
	for done < b.N {
		opts.MaxTokens = min(64, b.N-done)
		c0 := cpuTime()
		res, err := s.Generate(ctx, opts, func(Piece) error { return nil })
		cpu += cpuTime() - c0
		if err != nil {
			b.Fatal(err)
		}
		done += max(res.Stats.TokensOut, 1)
		b.StopTimer()
		if err := s.Rollback(ctx, mark); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(done), "cpu-ms/token")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
}
