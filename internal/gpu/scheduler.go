package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ollama/ollama/llama"
	"go.uber.org/zap"
)

// part is one sequence's share of a step: n tokens from the front of its pending list.
type part struct {
	seq    *Sequence
	n      int
	logits bool
	idx    int // batch index of the logits row
}

func (r *Runner) apply(o op) {
	s := o.seq
	switch o.kind {
	case opAdd:
		r.seqs = append(r.seqs, s)
		s.histLen.Store(0)
	case opAppend:
		r.applyAppend(s, o.app)
	case opGenerate:
		r.applyGenerate(s, o.gen)
	case opAbort:
		if s.active == nil || s.active != o.gen {
			return // already finished
		}
		g := s.active
		if !o.keep {
			r.rollback(s, g.produced)
		}
		r.finish(s, "abort", nil)
	case opRollback:
		o.res <- r.applyRollback(s, o.mark)
	case opForget:
		o.res <- r.applyForget(s, o.span[0], o.span[1])
	case opScore:
		r.applyScore(s, o.score)
	case opClose:
		r.failSeq(s, ErrClosed)
		s.schedClosed = true
		r.lctx.KvCacheSeqRm(s.slot, -1, -1)
		s.history, s.pending = nil, nil
		r.seqs = slices.DeleteFunc(r.seqs, func(x *Sequence) bool { return x == s })
		r.freeSlot(s.slot)
		close(o.done)
	}
}

func (r *Runner) applyAppend(s *Sequence, job *appendJob) {
	switch {
	case s.schedClosed:
		job.res <- ErrClosed
		return
	case job.cancelled.Load():
		job.res <- errAppendCancelled
		return
	case s.active != nil:
		job.res <- ErrBusy
		return
	}
	toks := job.tokens
	if r.addBOS && len(s.history) == 0 && len(s.pending) == 0 && (len(toks) == 0 || toks[0] != r.bos) {
		toks = append([]int{r.bos}, toks...)
	}
	if r.cfg.Overflow == OverflowError && s.logicalLen()+len(toks) > s.opts.MaxContext {
		job.res <- fmt.Errorf("%w: %d + %d tokens > limit %d", ErrContextFull, s.logicalLen(), len(toks), s.opts.MaxContext)
		return
	}
	s.pending = append(s.pending, toks...)
	s.queued += int64(len(toks))
	job.target = s.queued - 1
	job.stats.Tokens = len(toks)
	s.waiters = append(s.waiters, job)
	s.histLen.Store(int64(s.logicalLen()))
	r.checkWaiters(s, 0, 0)
}

func (r *Runner) applyGenerate(s *Sequence, g *genJob) {
	if s.schedClosed {
		g.done <- genDone{reason: "abort", err: ErrClosed}
		return
	}
	if s.active != nil {
		g.done <- genDone{reason: "abort", err: ErrBusy}
		return
	}
	if len(s.pending) == 0 {
		if len(s.history) == 0 {
			if !r.addBOS {
				g.done <- genDone{reason: "stop", err: ErrEmptyHistory}
				return
			}
			s.pending = []int{r.bos}
			s.queued++
		} else {
			// The logits of the last history token are gone; decode it again.
			last := len(s.history) - 1
			r.lctx.KvCacheSeqRm(s.slot, last, -1)
			s.pending = []int{s.history[last]}
			s.history = s.history[:last]
			s.reprefill = 1
		}
	}
	if r.cfg.Overflow == OverflowError && s.logicalLen() >= s.opts.MaxContext {
		g.done <- genDone{reason: "length", err: ErrContextFull}
		return
	}
	g.endAt = r.dummyEndAt(s, g)
	s.active = g
}

// dropCancelled stops the prefill of appends whose callers left (response.cancel, barge-in,
// disconnect cancel their ctx): while the newest waiting append is cancelled and no generation
// runs, its tokens are rolled back, both those still pending and those already prefilled, so
// the history is as if it had never been appended and no more chunks of it are decoded. An
// older cancelled append behind a live one stays: the live one's tokens follow it.
func (r *Runner) dropCancelled(s *Sequence) {
	for s.active == nil && len(s.waiters) > 0 {
		w := s.waiters[len(s.waiters)-1]
		if !w.cancelled.Load() {
			return
		}
		s.waiters = s.waiters[:len(s.waiters)-1]
		n := min(w.stats.Tokens, s.logicalLen())
		done := n - min(n, len(s.pending)-s.reprefill) // already prefilled (in the history)
		r.rollback(s, n)
		s.queued -= int64(n)
		s.prefilled -= int64(max(done, 0))
		s.cancelledTokens.Add(int64(n))
		w.res <- errAppendCancelled
	}
}

// errAppendCancelled answers an Append whose caller already left; nobody reads it.
var errAppendCancelled = errors.New("append cancelled")

func (s *Sequence) logicalLen() int { return len(s.history) + len(s.pending) }

// checkWaiters completes the appends whose tokens (all but the deferred last one) are in the
// KV cache.
func (r *Runner) checkWaiters(s *Sequence, batchID int64, batchSize int) {
	n := 0
	for _, w := range s.waiters {
		if s.prefilled < w.target {
			break
		}
		w.stats.PrefillMs = ms(time.Since(w.submit))
		w.stats.BatchID, w.stats.BatchSize = batchID, batchSize
		w.res <- nil
		n++
	}
	s.waiters = s.waiters[n:]
}

// failSeq ends every call waiting on s with err; the sequence itself stays usable.
func (r *Runner) failSeq(s *Sequence, err error) {
	for _, w := range s.waiters {
		w.res <- err
	}
	s.waiters = nil
	if s.active != nil {
		r.finish(s, "abort", err)
	}
}

func (r *Runner) finish(s *Sequence, reason string, err error) {
	g := s.active
	s.active = nil
	tail := ""
	if reason != "abort" {
		tail = g.leadingTrim(validText(g.text))
	}
	g.text = ""
	// Publish the history before the caller can observe the end of its Generate.
	s.histLen.Store(int64(s.logicalLen()))
	g.done <- genDone{reason: reason, err: err, tail: tail}
}

// rollback drops the last n tokens of the history (a Generate aborted without keeping them).
func (r *Runner) rollback(s *Sequence, n int) {
	fromPending := min(n, len(s.pending))
	s.pending = s.pending[:len(s.pending)-fromPending]
	n -= fromPending
	if n > 0 {
		keep := max(0, len(s.history)-n)
		r.lctx.KvCacheSeqRm(s.slot, keep, -1)
		s.history = s.history[:keep]
	}
	s.reprefill = min(s.reprefill, len(s.pending))
	s.histLen.Store(int64(s.logicalLen()))
}

// applyRollback drops the history after mark: tokens appended or generated since, prefilled
// or still pending, leave the KV cache as if they had never been there.
func (r *Runner) applyRollback(s *Sequence, m Mark) error {
	switch {
	case s.schedClosed:
		return ErrClosed
	case s.active != nil || len(s.waiters) > 0:
		return ErrBusy
	case s.truncations.Load() != m.truncations || m.n > s.logicalLen():
		return ErrMarkLost
	}
	r.rollback(s, s.logicalLen()-m.n)
	// Nothing waits on the sequence, so the append counters may restart from what is decoded:
	// the next Append's target then counts its own tokens only.
	s.queued = s.prefilled + int64(len(s.pending)-s.reprefill)
	return nil
}

// truncate frees at least need cells of s by dropping the oldest history after KeepPrefix:
// a KV shift when the cache supports it, else the kept tail is queued for re-prefill.
func (r *Runner) truncate(s *Sequence, need int) bool {
	keep := min(s.opts.KeepPrefix, len(s.history))
	avail := len(s.history) - keep
	if avail < need || need <= 0 {
		return false
	}
	// Drop a quarter of the window at once so shifts are rare, not once per token.
	discard := min(avail, max(need, (s.opts.MaxContext-keep)/4))
	h := len(s.history)
	s.truncations.Add(1)
	if r.canShift {
		r.lctx.KvCacheSeqRm(s.slot, keep, keep+discard)
		r.lctx.KvCacheSeqAdd(s.slot, keep+discard, h, -discard)
		s.history = slices.Delete(s.history, keep, keep+discard)
	} else {
		r.lctx.KvCacheSeqRm(s.slot, keep, -1)
		tail := append([]int(nil), s.history[keep+discard:]...)
		s.history = s.history[:keep]
		s.pending = append(tail, s.pending...)
		s.reprefill += len(tail)
	}
	r.log.Debug("sequence context truncated", zap.Int("seq", s.slot), zap.Int("dropped", discard), zap.Int("kept_prefix", keep))
	s.histLen.Store(int64(s.logicalLen()))
	return true
}

// step packs one batch from every live sequence and decodes it: first one decode token for
// each generating sequence, then prefill chunks round-robin, so a long prefill never delays
// anyone's next token by more than one chunk. It reports whether there was work.
func (r *Runner) step() bool {
	for _, s := range r.seqs {
		r.dropCancelled(s)
	}
	budget := r.cfg.BatchSize
	r.batch.Clear()
	r.parts = r.parts[:0]
	taken := make(map[*Sequence]bool, len(r.seqs))
	add := func(s *Sequence, n int, logits bool) {
		h := len(s.history)
		if h+n > s.opts.MaxContext {
			// Only the truncate policy gets here: the error policy refuses at enqueue time.
			if !r.truncate(s, h+n-s.opts.MaxContext) {
				r.failSeq(s, fmt.Errorf("%w: cannot make room for %d tokens", ErrContextFull, n))
				s.pending = nil
				s.histLen.Store(int64(s.logicalLen()))
				return
			}
			// Without a KV shift the kept tail was queued in front for re-prefill.
			h = len(s.history)
			n = min(n, s.opts.MaxContext-h)
			logits = logits && n == len(s.pending)
		}
		if n <= 0 {
			return
		}
		for i := range n {
			r.batch.Add(s.pending[i], nil, h+i, logits && i == n-1, s.slot)
		}
		r.parts = append(r.parts, part{seq: s, n: n, logits: logits, idx: r.batch.NumTokens() - 1})
		budget -= n
		taken[s] = true
	}
	ready := func(s *Sequence) bool { return s.active != nil && len(s.active.out) < cap(s.active.out) }
	for _, s := range r.seqs {
		if budget > 0 && ready(s) && len(s.pending) == 1 && s.active.produced > 0 {
			add(s, 1, true)
		}
	}
	n := len(r.seqs)
	for i := 0; i < n && budget > 0; i++ {
		s := r.seqs[(r.rr+i)%n]
		if taken[s] || len(s.pending) == 0 {
			continue
		}
		// A chunk never exceeds half the window, so truncation can always make room for it.
		k := min(len(s.pending), r.cfg.PrefillChunk, max(1, s.opts.MaxContext/2), budget)
		out := ready(s) && k == len(s.pending)
		if !out && k == len(s.pending) {
			k-- // defer the last token until someone needs its logits
		}
		if k > 0 {
			add(s, k, out)
		}
	}
	if n > 0 {
		r.rr = (r.rr + 1) % n
	}
	if len(r.parts) == 0 {
		return false
	}
	id := r.batchID.Add(1)
	size := len(r.parts)
	t0 := time.Now()
	err := r.lctx.Decode(r.batch)
	dt := time.Since(t0)
	if err != nil {
		r.decodeFailed(err)
		return true
	}
	for _, p := range r.parts {
		s := p.seq
		s.history = append(s.history, s.pending[:p.n]...)
		s.pending = s.pending[p.n:]
		re := min(p.n, s.reprefill)
		s.reprefill -= re
		s.prefilled += int64(p.n - re)
		s.decoded.Add(int64(p.n))
		if g := s.active; g != nil && g.produced == 0 {
			g.tokensIn += p.n
			g.prefillMs += ms(dt)
		}
		r.checkWaiters(s, id, size)
		if p.logits && s.active != nil {
			r.sample(s, p.idx, id, size)
		}
		s.histLen.Store(int64(s.logicalLen()))
	}
	return true
}

// decodeFailed handles a failed llama_decode. KV full: the sequence holding the most cells
// is truncated (truncate policy) or failed with ErrContextFull; the others retry next step.
func (r *Runner) decodeFailed(err error) {
	if errors.Is(err, llama.ErrKvCacheFull) {
		r.kvFull.Add(1)
		var hog *Sequence
		for _, p := range r.parts {
			if hog == nil || len(p.seq.history) > len(hog.history) {
				hog = p.seq
			}
		}
		// A planned cache never gets here (engine.context_size ≥ sequences × seq_context, checked
		// at start-up): say so loudly, it is a capacity condition the operator must see.
		r.log.Warn("KV cache full: the longest sequence gives way", zap.Int("cells", r.cfg.ContextSize),
			zap.Int("sequences", len(r.seqs)), zap.Int("longest", len(hog.history)), zap.String("overflow", r.cfg.Overflow))
		if r.cfg.Overflow == OverflowTruncate && r.truncate(hog, max(1, len(hog.history)/2)) {
			return
		}
		r.failSeq(hog, fmt.Errorf("%w: shared KV cache (%d cells) is full", ErrContextFull, r.cfg.ContextSize))
		hog.pending = nil
		hog.histLen.Store(int64(hog.logicalLen()))
		return
	}
	err = fmt.Errorf("%w: %w", ErrDecode, err)
	r.decodeErrors.Add(1)
	r.log.Error("llama decode failed", zap.Error(err), zap.Int("sequences", len(r.parts)))
	for _, p := range r.parts {
		r.lctx.KvCacheSeqRm(p.seq.slot, len(p.seq.history), -1)
		r.failSeq(p.seq, err)
		p.seq.pending = nil
		p.seq.histLen.Store(int64(p.seq.logicalLen()))
	}
}

// sample picks the next token of s's generation from logits row idx and releases its text.
func (r *Runner) sample(s *Sequence, idx int, batchID int64, batchSize int) {
	g := s.active
	tok, lp, err := r.sampleNext(g, idx)
	if errors.Is(err, errSamplerFreed) {
		// The caller's Generate returned (abort, ctx, Close) and freed its sampler; the abort
		// or close op it queued first ends the job (with the rollback it asked for).
		return
	}
	if err != nil {
		r.finish(s, "stop", err)
		return
	}
	g.sampler.accept(tok)
	g.produced++
	s.pending = append(s.pending, tok)
	ev := genEvent{piece: Piece{Token: tok}, at: time.Now(), batchID: batchID, batchSize: batchSize,
		tokensIn: g.tokensIn, prefillMs: g.prefillMs}
	if r.model.TokenIsEog(tok) {
		g.out <- ev
		r.finish(s, "stop", nil)
		return
	}
	g.text += r.model.TokenToPiece(tok)
	text, stopped := releasable(g.text, g.opts.Stop)
	leading := !g.spoke
	ev.piece.Text = g.leadingTrim(validText(text))
	if leading && lp != nil {
		// The reply's first position starts at its first visible character for every
		// alternative too, so the logprob tokens still join to the content.
		lp.Text = strings.TrimLeft(lp.Text, " \t\n\r")
		for i := range lp.Top {
			lp.Top[i].Text = strings.TrimLeft(lp.Top[i].Text, " \t\n\r")
		}
	}
	ev.piece.Logprob = lp
	g.text = g.text[len(text):]
	g.out <- ev
	switch {
	case stopped:
		g.text = ""
		r.finish(s, "stop", nil)
	case g.opts.MaxTokens > 0 && g.produced >= g.opts.MaxTokens:
		r.finish(s, "length", nil)
	case r.cfg.Overflow == OverflowError && s.logicalLen() >= s.opts.MaxContext:
		r.finish(s, "length", ErrContextFull)
	case g.opts.MaxTokens <= 0 && s.logicalLen() >= s.opts.MaxContext:
		// Unbounded generation ends at the window; truncation only serves bounded ones, so a
		// model that never emits EOS cannot run forever.
		r.finish(s, "length", nil)
	}
}

// leadingTrim drops the whitespace a reply's first tokens carry: word-initial tokens spell
// their space ("▁even", "Ġeven"), so the first one released reads " even". A reply's text
// starts at its first visible character, as every OpenAI answer does; the history keeps the
// tokens as sampled, and a token's logprob keeps its own text.
func (g *genJob) leadingTrim(text string) string {
	if g.spoke {
		return text
	}
	text = strings.TrimLeft(text, " \t\n\r")
	g.spoke = text != ""
	return text
}

// validText makes released text valid UTF-8: byte tokens can form invalid sequences (a random
// sampler draws them), which a JSON encoder would replace with U+FFFD on the wire only.
// Replacing each invalid run here, once, keeps the text a client receives, the text kept in a
// conversation's history and the transcript an audio id stands for the same string.
func validText(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// releasable returns the prefix of text that can be emitted: everything before the first stop
// string (stopped true), else all but a tail that could still begin a stop string or that
// ends in an incomplete UTF-8 sequence.
func releasable(text string, stops []string) (string, bool) {
	cut := -1
	for _, st := range stops {
		if st == "" {
			continue
		}
		if i := strings.Index(text, st); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		return text[:cut], true
	}
	end := len(text)
	for _, st := range stops {
		for k := min(len(st)-1, len(text)); k > 0; k-- {
			if strings.HasSuffix(text, st[:k]) {
				end = min(end, len(text)-k)
				break
			}
		}
	}
	if end > 0 {
		i := end - 1
		for i > 0 && !utf8.RuneStart(text[i]) {
			i--
		}
		if !utf8.FullRuneInString(text[i:end]) {
			end = i
		}
	}
	return text[:end], false
}
