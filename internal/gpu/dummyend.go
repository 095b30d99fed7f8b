package gpu

import (
	"encoding/binary"
	"hash/fnv"
	"math/rand/v2"
)

// The dummy models' end of a reply.
//
// A random-weight model has no reason to stop: the dummy's output rows leave EOS at logit 0
// against word logits spread with std 4, so it is practically never drawn, and every reply ran
// to MaxTokens. A real model ends its replies, and clients, the pipeline and the tests must see
// that end. The weights cannot give it: a llama model knows positions only through RoPE, so an
// EOS logit that rises with the reply's length needs a hand-built attention circuit measuring
// the distance back to the reply's start; RoPE's rotations are periodic, the KV cache keeps keys
// in f16 and 0.6b's weights are Q8_0, so such a circuit misfires in long conversations, and the
// lengths it gives could not be drawn per prompt.
//
// So the sampling step ends it, on dummy models only (Runner.dummyEnd: the GGUF carries
// general.omniserve_dummy; a real model never gets here). When a Generate starts, the scheduler
// draws the reply's length from the prompt (dummyReplyLen); once the reply has that many tokens
// the step picks the model's EOS instead of sampling, and the Generate ends the way a real
// model's EOS ends it (the EOS token joins the history, FinishReason "stop"). MaxTokens, a stop
// string or the window may end it first. A grammar-constrained reply (response_format, a forced
// tool call) is left to its grammar, which ends it when the grammar is complete; IgnoreEOS and
// a logit_bias of -100 on EOS (token 2) skip the end.

// The default lengths (Config.DummyReplyMin, DummyReplyMax), in tokens: each dummy token is a
// word, and a spoken reply of 8 to 32 words lasts about 3 to 12 s of flite audio (0.37 s a word).
const (
	dummyReplyMin = 8
	dummyReplyMax = 32
	// dummyReplySeedTokens: the drawn length depends on the prompt's last this many tokens
	// (the latest turns), so drawing it costs the same at any history length.
	dummyReplySeedTokens = 256
)

// dummyReplyLen draws a reply's length in [lo, hi] from the prompt's last dummyReplySeedTokens
// tokens (history, then pending) and the sampling seed: the same conversation gives the same
// lengths run after run, whatever the words drawn (RandomSeed leaves seed at its configured
// value). The distribution is that of the smaller of two uniform draws: short replies are
// common, long ones rarer (mean lo + (hi-lo)/3, about 16 words by default).
func dummyReplyLen(lo, hi int, seed uint32, history, pending []int) int {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint32(b[:4], seed)
	h.Write(b[:4])
	skip := max(0, len(history)+len(pending)-dummyReplySeedTokens)
	for _, part := range [][]int{history, pending} {
		n := min(skip, len(part))
		skip -= n
		for _, t := range part[n:] {
			binary.LittleEndian.PutUint32(b[:4], uint32(t))
			h.Write(b[:4])
		}
	}
	sum := h.Sum64()
	rng := rand.New(rand.NewPCG(sum, sum^0x9E3779B97F4A7C15))
	u := min(rng.Float64(), rng.Float64())
	return lo + int(u*float64(hi-lo+1))
}

// dummyEndAt is the number of tokens after which g's reply ends (0: no drawn end), read on the
// scheduler thread when the Generate starts, when s's history and pending input are its prompt.
// A logit_bias of -100 on EOS bans it, as OpenAI documents the value (a client that wants a
// reply to run to its max_tokens); a milder bias leaves the drawn end where it is.
func (r *Runner) dummyEndAt(s *Sequence, g *genJob) int {
	if !r.dummyEnd || g.opts.IgnoreEOS || g.sampling.Grammar != "" || g.sampling.LogitBias[dummyEOS] <= -MaxLogitBias {
		return 0
	}
	return dummyReplyLen(r.cfg.DummyReplyMin, r.cfg.DummyReplyMax, g.sampling.Seed, s.history, s.pending)
}

// sampleNext picks g's next token from logits row idx: the model's EOS once a dummy reply has
// its drawn length, else the sampler's draw.
func (r *Runner) sampleNext(g *genJob, idx int) (int, *TokenLogprob, error) {
	if g.endAt > 0 && g.produced >= g.endAt {
		return dummyEOS, nil, nil
	}
	return g.sampler.sampleAt(r.lctx, idx)
}
