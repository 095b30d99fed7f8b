package gpu

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/ollama/ollama/llama"
)

// BareDecodeResult is one run of BareDecodeBench.
type BareDecodeResult struct {
	Seqs, Tokens int     // sequences, decode steps
	Seconds      float64 // wall time of the decode steps
	TokS         float64 // Seqs*Tokens/Seconds
}

// BareDecodeBench measures what llama.cpp does without this package's scheduler: it loads
// cfg's model with the same model and context settings as Load, prefills promptLen tokens for
// each of nSeq sequences, then runs `tokens` decode steps with one token per sequence in one
// batch, greedy-sampled on the logits as the Runner does. `omniserve bench engine` compares the Runner
// with it (bridge overhead, batching limit of the hardware). It lives here because only this
// package may import the binding.
func BareDecodeBench(ctx context.Context, cfg Config, nSeq, promptLen, tokens int) (BareDecodeResult, error) {
	res := BareDecodeResult{Seqs: nSeq, Tokens: tokens}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return res, err
	}
	path := cfg.Model
	if preset, ok, err := parseDummy(cfg.Model); err != nil {
		return res, err
	} else if ok {
		if path, err = ensureDummy(cfg.CacheDir, preset); err != nil {
			return res, err
		}
	}
	if _, err := checkModelFile(path); err != nil {
		return res, err
	}
	backendInit()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mp := llama.ModelParams{UseMmap: true}
	onGPU := false
	if gpus := llama.EnumerateGPUs(); cfg.Device != "cpu" && len(gpus) > 0 {
		mp.NumGpuLayers, mp.Devices, onGPU = 999, []uint64{gpus[0].LlamaID}, true
	}
	model, err := llama.LoadModelFromFile(path, mp)
	if err != nil {
		return res, fmt.Errorf("bare bench: %w", err)
	}
	defer llama.FreeModel(model)
	cp := llama.NewContextParams(cfg.ContextSize, cfg.BatchSize, cfg.MaxSequences, cfg.Threads, flashAttention(cfg.FlashAttention, onGPU), "")
	setContextFlags(&cp, cfg.ContextSize, cfg.MaxSequences, cfg.Threads)
	lctx, err := llama.NewContextWithModel(model, cp)
	if err != nil {
		return res, fmt.Errorf("bare bench: %w", err)
	}
	defer freeContext(lctx)
	batch, err := llama.NewBatch(cfg.BatchSize, 1, 0)
	if err != nil {
		return res, fmt.Errorf("bare bench: %w", err)
	}
	defer batch.Free()
	prompt, err := model.Tokenize(benchText(promptLen), true, false)
	if err != nil {
		return res, fmt.Errorf("bare bench: %w", err)
	}
	prompt = prompt[:min(len(prompt), promptLen)]
	if nSeq*len(prompt) > cfg.BatchSize || nSeq > cfg.MaxSequences {
		return res, fmt.Errorf("bare bench: %d sequences of %d tokens exceed the batch", nSeq, len(prompt))
	}
	next := make([]int, nSeq)
	idx := make([]int, nSeq)
	for s := range nSeq {
		for i, t := range prompt {
			batch.Add(t, nil, i, i == len(prompt)-1, s)
		}
		idx[s] = batch.NumTokens() - 1
	}
	if err := lctx.Decode(batch); err != nil {
		return res, fmt.Errorf("bare bench prefill: %w", err)
	}
	for s := range nSeq {
		next[s] = argmax(lctx.GetLogitsIth(idx[s]))
	}
	t0 := time.Now()
	for step := range tokens {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		batch.Clear()
		for s := range nSeq {
			batch.Add(next[s], nil, len(prompt)+step, true, s)
		}
		if err := lctx.Decode(batch); err != nil {
			return res, fmt.Errorf("bare bench decode: %w", err)
		}
		for s := range nSeq {
			next[s] = argmax(lctx.GetLogitsIth(s))
		}
	}
	res.Seconds = time.Since(t0).Seconds()
	res.TokS = float64(nSeq*tokens) / res.Seconds
	return res, nil
}

// argmax is greedy sampling, as the Runner's sampler does it at temperature 0.
func argmax(logits []float32) int {
	best := 0
	for i, l := range logits {
		if l > logits[best] {
			best = i
		}
	}
	return best
}

// benchText is deterministic text of about n vocabulary words.
func benchText(n int) string {
	b := make([]byte, 0, n*6)
	for i := range n + 8 {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, dummyWords[(i*7919)%len(dummyWords)]...)
	}
	return string(b)
}

// BenchPrompt returns exactly n tokens of deterministic text (no BOS) for benchmarks.
func (r *Runner) BenchPrompt(n int) ([]int, error) {
	toks, err := r.Tokenize(benchText(n))
	if err != nil {
		return nil, err
	}
	if len(toks) < n {
		return nil, fmt.Errorf("bench prompt: %d tokens, want %d", len(toks), n)
	}
	return toks[:n], nil
}
