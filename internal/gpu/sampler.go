package gpu

import (
	cryptorand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/ollama/ollama/llama"
)

// Limits of the sampling parameters, as OpenAI documents them.
const (
	MaxPenalty     = 2   // presence_penalty and frequency_penalty lie in [-2, 2]
	MaxLogitBias   = 100 // logit_bias values lie in [-100, 100]
	MaxTopLogprobs = 20  // top_logprobs lies in [0, 20]
	// repeatLastN is the window of RepeatPenalty (llama.cpp's default).
	repeatLastN = 64
	// logitWindow: candidates more than this many temperature-scaled nats below the best one
	// carry less than e^-30 of its probability each; the top-k / top-p sort skips them, so it
	// sorts a handful of tokens instead of the whole vocabulary.
	logitWindow = 30
)

// SamplingError reports a sampling parameter the engine cannot honour; Param names it in
// OpenAI's spelling (logit_bias, presence_penalty, response_format, ...).
type SamplingError struct {
	Param  string
	Detail string
}

func (e *SamplingError) Error() string {
	return fmt.Sprintf("engine: invalid %s: %s", e.Param, e.Detail)
}

// ErrGrammarStuck reports a grammar that allows no next token (the generation cannot go on).
var ErrGrammarStuck = errors.New("engine: the grammar allows no next token")

// TokenLogprob is one generated token's log probability and, when asked, the most likely
// alternatives at its position. Log probabilities are those of the distribution after
// logit_bias and penalties, before temperature, top-k / top-p and grammar: what the model
// (as biased by the request) thinks of each token.
type TokenLogprob struct {
	Token   int
	Text    string
	Logprob float32
	Top     []TopLogprob
}

// TopLogprob is one alternative of a TokenLogprob.
type TopLogprob struct {
	Token   int
	Text    string
	Logprob float32
}

// CheckSampling validates s against this model: value ranges, logit_bias token ids inside the
// vocabulary, and that Grammar compiles. Errors are *SamplingError.
func (r *Runner) CheckSampling(s *Sampling) error {
	if err := s.checkRanges(); err != nil {
		return err
	}
	for id := range s.LogitBias {
		if id < 0 || id >= r.vocab {
			return &SamplingError{Param: "logit_bias", Detail: fmt.Sprintf("token id %d is outside the vocabulary of %d tokens", id, r.vocab)}
		}
	}
	if s.Grammar != "" {
		g, err := r.newGrammar(s.Grammar)
		if err != nil {
			return err
		}
		g.Free()
	}
	return nil
}

func (s *Sampling) checkRanges() error {
	bad := func(v float32) bool { return math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) }
	if bad(s.Temperature) || s.Temperature < 0 {
		return &SamplingError{Param: "temperature", Detail: fmt.Sprintf("%g is not >= 0", s.Temperature)}
	}
	for _, p := range []struct {
		name string
		v    float32
	}{{"presence_penalty", s.PresencePenalty}, {"frequency_penalty", s.FrequencyPenalty}} {
		if bad(p.v) || p.v < -MaxPenalty || p.v > MaxPenalty {
			return &SamplingError{Param: p.name, Detail: fmt.Sprintf("%g is not between -%d and %d", p.v, MaxPenalty, MaxPenalty)}
		}
	}
	for id, b := range s.LogitBias {
		if bad(b) || b < -MaxLogitBias || b > MaxLogitBias {
			return &SamplingError{Param: "logit_bias", Detail: fmt.Sprintf("bias %g of token %d is not between -%d and %d", b, id, MaxLogitBias, MaxLogitBias)}
		}
	}
	if s.TopLogprobs < 0 || s.TopLogprobs > MaxTopLogprobs {
		return &SamplingError{Param: "top_logprobs", Detail: fmt.Sprintf("%d is not between 0 and %d", s.TopLogprobs, MaxTopLogprobs)}
	}
	return nil
}

// grammarVocab is the vocabulary as the grammar sees it: each token's text without special
// rendering (control tokens are empty, so a grammar never admits them) and the end tokens.
type grammarVocab struct {
	ids    []uint32
	pieces []string
	eog    []int32
}

func (r *Runner) grammarVocabulary() *grammarVocab {
	r.gvOnce.Do(func() {
		gv := &grammarVocab{ids: make([]uint32, r.vocab), pieces: make([]string, r.vocab)}
		for i := range r.vocab {
			gv.ids[i] = uint32(i)
			gv.pieces[i] = plainPiece(r.model, i)
			if r.model.TokenIsEog(i) {
				gv.eog = append(gv.eog, int32(i))
			}
		}
		r.gv = gv
	})
	return r.gv
}

func (r *Runner) newGrammar(gbnf string) (*llama.Grammar, error) {
	gv := r.grammarVocabulary()
	g := llama.NewGrammar(gbnf, gv.ids, gv.pieces, gv.eog)
	if g == nil {
		return nil, &SamplingError{Param: "response_format", Detail: "the grammar does not compile (llama.cpp's log has the parse error)"}
	}
	return g, nil
}

// sampler picks the tokens of one Generate. It is built on the caller's goroutine (a grammar
// can take a while to compile) and then used only by the scheduler; free may race with the
// scheduler's last use, which llama.Grammar tolerates (a freed grammar constrains nothing).
//
// Two implementations: llama.cpp's own sampler chain (native, in C: temperature, top-k, top-p,
// penalties, seed and grammar) for everything it can do, and the Go one on the logits row when
// the request needs logprobs or logit_bias, which the binding's chain does not expose. The C
// chain is several times faster on a large vocabulary (BenchmarkSamplerVocab151k).
type sampler struct {
	r       *Runner
	s       Sampling
	native  *nativeSampler
	rng     *rand.Rand
	grammar *llama.Grammar
	counts  map[int32]int // generated tokens, for the presence and frequency penalties
	recent  []int32       // the last repeatLastN generated tokens, for RepeatPenalty
	cands   []llama.TokenData
	work    []llama.TokenData
	probs   []float64
	// noEOG masks the end-of-generation tokens (GenerateOptions.IgnoreEOS on a real model).
	noEOG []int32
}

// newSampler builds the sampler of one Generate. ignoreEOS masks a real model's end tokens
// (the C chain cannot, so it takes the Go sampler); a dummy model's end is not sampled
// (dummyend.go), and a grammar keeps its end.
func (r *Runner) newSampler(s Sampling, ignoreEOS bool) (*sampler, error) {
	if err := r.CheckSampling(&s); err != nil {
		return nil, err
	}
	seed := uint64(s.Seed)
	if s.RandomSeed {
		var b [8]byte
		_, _ = cryptorand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	sm := &sampler{r: r, s: s, rng: rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15)), counts: map[int32]int{}}
	if ignoreEOS && !r.dummyEnd && s.Grammar == "" {
		sm.noEOG = r.grammarVocabulary().eog
	}
	if !s.Logprobs && len(s.LogitBias) == 0 && sm.noEOG == nil {
		native, err := newNativeSampler(r.lctx, s.nativeParams(uint32(seed)))
		if err != nil {
			return nil, err
		}
		sm.native = native
		return sm, nil
	}
	if s.Grammar != "" {
		g, err := r.newGrammar(s.Grammar)
		if err != nil {
			return nil, err
		}
		sm.grammar = g
	}
	return sm, nil
}

func (sm *sampler) free() {
	if sm == nil {
		return
	}
	if sm.native != nil {
		sm.native.free()
	}
	if sm.grammar != nil {
		sm.grammar.Free()
	}
}

// nativeParams maps s onto llama.cpp's sampler chain. Its presence and frequency penalties look
// at the last RepeatLastN accepted tokens; a window as long as any completion makes them count
// every generated token, as OpenAI defines them.
func (s *Sampling) nativeParams(seed uint32) nativeParams {
	p := nativeParams{
		TopK: s.TopK, TopP: s.TopP, Temp: s.Temperature,
		LastN: repeatLastN, Repeat: s.RepeatPenalty, Freq: s.FrequencyPenalty, Present: s.PresencePenalty,
		Seed: seed, Grammar: s.Grammar,
	}
	if p.TopP <= 0 || p.TopP > 1 {
		p.TopP = 1
	}
	if p.Repeat <= 0 {
		p.Repeat = 1
	}
	if s.PresencePenalty != 0 || s.FrequencyPenalty != 0 {
		p.LastN = nativePenaltyWindow
	}
	return p
}

// nativePenaltyWindow is the penalty window of the C chain when OpenAI's penalties are on: the
// largest completion the chat endpoint accepts.
const nativePenaltyWindow = 4096

// sampleAt picks the next token from row idx of the context's logits.
func (sm *sampler) sampleAt(lctx *llama.Context, idx int) (int, *TokenLogprob, error) {
	if sm.native != nil {
		tok, err := sm.native.sample(lctx, idx)
		return tok, nil, err
	}
	return sm.sample(lctx.GetLogitsIth(idx))
}

// sample picks the next token from one row of logits. lp is set when Logprobs is asked.
func (sm *sampler) sample(logits []float32) (tok int, lp *TokenLogprob, err error) {
	if len(logits) == 0 {
		return -1, nil, ErrNoLogits
	}
	sm.adjust(logits)
	if cap(sm.cands) < len(logits) {
		sm.cands = make([]llama.TokenData, len(logits))
	}
	c := sm.cands[:len(logits)]
	for i, l := range logits {
		c[i] = llama.TokenData{ID: int32(i), Logit: l}
	}
	id := sm.draw(c)
	if sm.grammar != nil && id >= 0 {
		one := []llama.TokenData{{ID: id, Logit: 0}}
		sm.grammar.Apply(one)
		if math.IsInf(float64(one[0].Logit), -1) {
			// The likely token breaks the grammar: mask the whole row and draw again.
			sm.grammar.Apply(c)
			id = sm.draw(c)
		}
	}
	if id < 0 {
		return -1, nil, ErrGrammarStuck
	}
	if sm.s.Logprobs {
		lp = sm.logprob(logits, int(id))
	}
	return int(id), lp, nil
}

// accept records a generated token for the penalties and advances the grammar.
func (sm *sampler) accept(tok int) {
	if sm.native != nil {
		// The grammar advances with every token but the end, which it has already allowed.
		sm.native.accept(tok, sm.s.Grammar != "" && !sm.r.model.TokenIsEog(tok))
		return
	}
	t := int32(tok)
	sm.counts[t]++
	sm.recent = append(sm.recent, t)
	if len(sm.recent) > repeatLastN {
		sm.recent = sm.recent[len(sm.recent)-repeatLastN:]
	}
	if sm.grammar != nil && !sm.r.model.TokenIsEog(tok) {
		sm.grammar.Accept(t)
	}
}

// adjust applies logit_bias, the penalties and the IgnoreEOS mask in place.
func (sm *sampler) adjust(logits []float32) {
	for _, id := range sm.noEOG {
		logits[id] = float32(math.Inf(-1))
	}
	for id, b := range sm.s.LogitBias {
		if id >= 0 && id < len(logits) {
			logits[id] += b
		}
	}
	if rp := sm.s.RepeatPenalty; rp > 0 && rp != 1 {
		seen := make(map[int32]bool, len(sm.recent))
		for _, t := range sm.recent {
			if seen[t] {
				continue
			}
			seen[t] = true
			if logits[t] > 0 {
				logits[t] /= rp
			} else {
				logits[t] *= rp
			}
		}
	}
	// OpenAI's definition: mu[j] -= c[j] * frequency_penalty + (c[j] > 0) * presence_penalty.
	if sm.s.PresencePenalty != 0 || sm.s.FrequencyPenalty != 0 {
		for t, n := range sm.counts {
			logits[t] -= float32(n)*sm.s.FrequencyPenalty + sm.s.PresencePenalty
		}
	}
}

// draw picks a token from c (masked tokens have logit -Inf) with temperature, top-k and top-p;
// -1 when every token is masked. c is left intact.
//
// Only tokens within logitWindow (temperature-scaled) of the best one take part: the others carry
// less than e^-30 of its probability each. Top-k / top-p find their cut with a histogram of the
// logits and sort only the tokens above it, not the whole vocabulary.
func (sm *sampler) draw(c []llama.TokenData) int32 {
	best := -1
	for i := range c {
		if !math.IsInf(float64(c[i].Logit), -1) && (best < 0 || c[i].Logit > c[best].Logit) {
			best = i
		}
	}
	if best < 0 {
		return -1
	}
	temp := sm.s.Temperature
	if temp <= 0 {
		return c[best].ID
	}
	maxL := c[best].Logit
	cut := maxL - logitWindow*temp
	w, probs := sm.work[:0], sm.probs[:0]
	var sum float64
	for _, t := range c {
		if t.Logit >= cut {
			p := math.Exp(float64((t.Logit - maxL) / temp))
			w, probs = append(w, t), append(probs, p)
			sum += p
		}
	}
	sm.work, sm.probs = w, probs
	topP := sm.s.TopP
	if topP <= 0 || topP > 1 {
		topP = 1
	}
	topK := sm.s.TopK
	if (topK > 0 && topK < len(w)) || topP < 1 {
		w, probs, sum = sm.nucleus(w, probs, sum, cut, maxL, temp, topK, topP)
	}
	x := sm.rng.Float64() * sum
	for i, p := range probs {
		x -= p
		if x < 0 && p > 0 {
			return w[i].ID
		}
	}
	return c[best].ID // rounding left x >= 0: the last step belongs to the best token
}

// drawBuckets is the resolution of the histogram that finds the top-k / top-p cut.
const drawBuckets = 1024

// nucleus reduces the window w (weights probs, total sum) to the top-k tokens, then to the
// smallest prefix of them, by probability, that holds topP of their mass.
func (sm *sampler) nucleus(w []llama.TokenData, probs []float64, sum float64, cut, maxL, temp float32, topK int, topP float32) ([]llama.TokenData, []float64, float64) {
	var cnt [drawBuckets]int
	var mass [drawBuckets]float64
	scale := float32(drawBuckets) / (maxL - cut)
	bucket := func(l float32) int { return min(drawBuckets-1, max(0, int((l-cut)*scale))) }
	for i, t := range w {
		b := bucket(t.Logit)
		cnt[b]++
		mass[b] += probs[i]
	}
	// The lowest bucket that must stay: enough tokens for top-k, else enough mass for top-p.
	lo, n, m := drawBuckets-1, 0, 0.0
	for ; lo > 0; lo-- {
		n += cnt[lo]
		m += mass[lo]
		if (topK > 0 && n >= topK) || (topK <= 0 && m >= float64(topP)*sum) {
			break
		}
	}
	keep := w[:0]
	for _, t := range w {
		if bucket(t.Logit) >= lo {
			keep = append(keep, t)
		}
	}
	slices.SortFunc(keep, func(a, b llama.TokenData) int {
		switch {
		case a.Logit > b.Logit:
			return -1
		case a.Logit < b.Logit:
			return 1
		}
		return int(a.ID - b.ID)
	})
	if topK > 0 && topK < len(keep) {
		keep = keep[:topK]
	}
	probs = probs[:len(keep)]
	sum = 0
	for i, t := range keep {
		probs[i] = math.Exp(float64((t.Logit - maxL) / temp))
		sum += probs[i]
	}
	if topP < 1 {
		var cum float64
		for i, p := range probs {
			cum += p
			if cum >= float64(topP)*sum {
				return keep[:i+1], probs[:i+1], cum
			}
		}
	}
	return keep, probs, sum
}

// logprob computes the chosen token's log probability and the top alternatives from the
// adjusted logits.
func (sm *sampler) logprob(logits []float32, tok int) *TokenLogprob {
	maxL := float32(math.Inf(-1))
	for _, l := range logits {
		maxL = max(maxL, l)
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l - maxL))
	}
	logZ := float64(maxL) + math.Log(sum)
	lp := func(id int) float32 { return float32(float64(logits[id]) - logZ) }
	out := &TokenLogprob{Token: tok, Text: sm.r.model.TokenToPiece(tok), Logprob: lp(tok)}
	if n := sm.s.TopLogprobs; n > 0 {
		top := make([]int, 0, n+1)
		for id, l := range logits {
			if len(top) == n && l <= logits[top[n-1]] {
				continue
			}
			i, _ := slices.BinarySearchFunc(top, l, func(t int, v float32) int {
				if logits[t] >= v {
					return -1
				}
				return 1
			})
			top = slices.Insert(top, i, id)
			if len(top) > n {
				top = top[:n]
			}
		}
		for _, id := range top {
			out.Top = append(out.Top, TopLogprob{Token: id, Text: sm.r.model.TokenToPiece(id), Logprob: lp(id)})
		}
	}
	return out
}
