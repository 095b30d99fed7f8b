package gpu

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Sequence is one conversation's slot in the KV cache: appended input and generated output
// form one history that later calls continue. Methods are safe for concurrent use; at most one
// Generate runs at a time and Append is refused (ErrBusy) while it does.
type Sequence struct {
	r    *Runner
	slot int
	opts SeqOptions

	mu     sync.Mutex
	closed bool
	gen    *genJob // the running Generate, for Abort and Close

	histLen atomic.Int64 // logical history length, published by the scheduler
	decoded atomic.Int64 // tokens this sequence has put through llama_decode (tests)
	// cancelledTokens counts tokens of cancelled appends rolled back by the scheduler (tests).
	cancelledTokens atomic.Int64

	// Owned by the scheduler goroutine.
	history     []int // tokens in the KV cache, at positions 0..len-1
	pending     []int // tokens to prefill; the last one waits for the next Append or Generate
	reprefill   int   // leading pending tokens that are re-prefills after truncation
	queued      int64 // appended tokens ever queued
	prefilled   int64 // appended tokens ever decoded
	waiters     []*appendJob
	active      *genJob
	schedClosed bool
	// truncations counts context truncations (written by the scheduler): a Mark from before
	// one is lost, the positions moved.
	truncations atomic.Int64
}

type appendJob struct {
	tokens    []int
	submit    time.Time
	target    int64
	stats     AppendStats
	res       chan error // cap 1
	cancelled atomic.Bool
}

type genJob struct {
	opts      GenerateOptions
	sampling  Sampling
	submit    time.Time
	out       chan genEvent // cap outCap; only the scheduler sends
	done      chan genDone  // cap 1
	abort     chan struct{} // closed by Abort/Close so the caller returns at once
	abortOnce sync.Once

	// Built by Generate, then used by the scheduler.
	sampler   *sampler
	produced  int
	endAt     int    // a dummy reply's drawn length (dummyend.go); 0: none
	text      string // generated text not yet released (could start a stop string)
	spoke     bool   // released text has begun (leadingTrim)
	tokensIn  int
	prefillMs float64
}

type genEvent struct {
	piece     Piece
	at        time.Time
	batchID   int64
	batchSize int
	tokensIn  int
	prefillMs float64
}

type genDone struct {
	reason string
	err    error
	tail   string // text released at the end (held back for stop strings)
}

func (g *genJob) stop() { g.abortOnce.Do(func() { close(g.abort) }) }

// ID is the KV sequence id (slot) of this sequence.
func (s *Sequence) ID() int { return s.slot }

// HistoryLen is the number of tokens in the sequence's history (after any truncation).
func (s *Sequence) HistoryLen() int { return int(s.histLen.Load()) }

func (s *Sequence) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.gen != nil {
		return ErrBusy
	}
	return nil
}

// AppendText tokenizes text (no BOS; the first append of a sequence gets BOS when the model
// wants one) and appends it.
func (s *Sequence) AppendText(ctx context.Context, text string) (AppendStats, error) {
	toks, err := s.r.Tokenize(text)
	if err != nil {
		return AppendStats{}, err
	}
	return s.Append(ctx, toks)
}

// Append adds tokens to the history and returns once they are in the KV cache (all but the
// last, which is decoded together with the next Append or Generate so that no step is spent
// on logits nobody reads). If ctx ends first, the prefill stops within one step and Append
// returns ctx.Err() after that step: when it is the newest append and no generation runs, its
// tokens are rolled back (prefilled ones included); otherwise they stay in the history. An
// append whose prefill was done by then returns its stats, not an error.
func (s *Sequence) Append(ctx context.Context, tokens []int) (AppendStats, error) {
	for _, t := range tokens {
		if t < 0 || t >= s.r.vocab {
			return AppendStats{}, fmt.Errorf("append: %w: token %d outside vocabulary of %d", ErrInvalidToken, t, s.r.vocab)
		}
	}
	if err := s.begin(); err != nil {
		return AppendStats{}, err
	}
	now := time.Now()
	job := &appendJob{tokens: append([]int(nil), tokens...), submit: now, res: make(chan error, 1),
		stats: AppendStats{SubmitTS: wallSeconds(now)}}
	if !s.r.enqueue(op{kind: opAppend, seq: s, app: job}) {
		return AppendStats{}, ErrClosed
	}
	select {
	case err := <-job.res:
		if err != nil {
			return AppendStats{}, fmt.Errorf("append: %w", err)
		}
		return job.stats, nil
	case <-ctx.Done():
		// The scheduler stops the prefill at its next step (dropCancelled); wait for that step,
		// a chunk's decode, so that the caller reads the sequence as it is when Append returns:
		// rolled back, or holding every token when the prefill finished first (then it
		// succeeded). A caller that prefills again at once would otherwise race the rollback.
		job.cancelled.Store(true)
		s.r.signal()
		select {
		case err := <-job.res:
			if err == nil {
				return job.stats, nil
			}
		case <-s.r.done:
		}
		return AppendStats{}, ctx.Err()
	}
}

// Generate samples tokens after the history until EOS, MaxTokens, a stop string, the
// context limit, Abort, or ctx ends, calling emit on the caller's goroutine for each token.
// Generated tokens join the history. An emit error aborts (history kept) and is returned.
func (s *Sequence) Generate(ctx context.Context, opts GenerateOptions, emit func(Piece) error) (GenerateResult, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return GenerateResult{}, ErrClosed
	}
	if s.gen != nil {
		s.mu.Unlock()
		return GenerateResult{}, ErrBusy
	}
	now := time.Now()
	g := &genJob{opts: opts, sampling: s.opts.Sampling, submit: now,
		out: make(chan genEvent, outCap), done: make(chan genDone, 1), abort: make(chan struct{})}
	if opts.Sampling != nil {
		g.sampling = *opts.Sampling
	}
	s.gen = g
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.gen = nil
		s.mu.Unlock()
	}()
	// Built here, not on the scheduler thread: compiling a grammar against the vocabulary
	// would stall every other sequence's step.
	sm, err := s.r.newSampler(g.sampling, opts.IgnoreEOS)
	if err != nil {
		return GenerateResult{FinishReason: "abort"}, fmt.Errorf("generate: %w", err)
	}
	g.sampler = sm
	defer sm.free()

	res := GenerateResult{Stats: GenStats{SubmitTS: wallSeconds(now)}}
	var first, last time.Time
	take := func(ev genEvent) error {
		st := &res.Stats
		if st.TokensOut == 0 {
			first = ev.at
			st.BatchID, st.BatchSize = ev.batchID, ev.batchSize
			st.TokensIn, st.PrefillMs = ev.tokensIn, ev.prefillMs
			st.TTFTMs = ms(ev.at.Sub(g.submit))
		} else {
			st.ITLsMs = append(st.ITLsMs, ms(ev.at.Sub(last)))
		}
		last = ev.at
		st.TokensOut++
		return emit(ev.piece)
	}
	finish := func(reason string) {
		res.FinishReason = reason
		if res.Stats.TokensOut > 1 {
			res.Stats.DecodeMs = ms(last.Sub(first))
			res.Stats.TPOTMs = res.Stats.DecodeMs / float64(res.Stats.TokensOut-1)
		}
	}
	if !s.r.enqueue(op{kind: opGenerate, seq: s, gen: g}) {
		return res, ErrClosed
	}
	for {
		select {
		case ev := <-g.out:
			if len(g.out) >= outCap-1 {
				// The buffer was full, so the scheduler left this sequence out; wake it.
				s.r.signal()
			}
			if err := take(ev); err != nil {
				s.abortGen(g, true)
				finish("abort")
				return res, fmt.Errorf("generate: emit: %w", err)
			}
		case d := <-g.done:
			for drained := false; !drained; {
				select {
				case ev := <-g.out:
					if err := take(ev); err != nil {
						finish("abort")
						return res, fmt.Errorf("generate: emit: %w", err)
					}
				default:
					drained = true
				}
			}
			if d.tail != "" {
				if err := emit(Piece{Token: -1, Text: d.tail}); err != nil {
					finish(d.reason)
					return res, fmt.Errorf("generate: emit: %w", err)
				}
			}
			finish(d.reason)
			if d.err != nil {
				return res, fmt.Errorf("generate: %w", d.err)
			}
			return res, nil
		case <-g.abort:
			finish("abort")
			return res, nil
		case <-ctx.Done():
			s.abortGen(g, true)
			finish("abort")
			return res, ctx.Err()
		}
	}
}

func (s *Sequence) abortGen(g *genJob, keep bool) {
	s.r.enqueue(op{kind: opAbort, seq: s, gen: g, keep: keep})
	g.stop()
}

// Abort stops a running Generate at once (it returns FinishReason "abort"). keepHistory false
// removes the tokens that Generate produced from the history, so the sequence continues from
// the conversation before it. Without a running Generate, Abort does nothing.
func (s *Sequence) Abort(keepHistory bool) {
	s.mu.Lock()
	g := s.gen
	s.mu.Unlock()
	if g != nil {
		s.abortGen(g, keepHistory)
	}
}

// Mark is a point in a sequence's history to roll back to (Rollback).
type Mark struct {
	n           int
	truncations int64
}

// Mark returns the current end of the history. Take it while no Append or Generate of the
// sequence runs (the caller serializes them): it is the length the last one left.
func (s *Sequence) Mark() Mark {
	return Mark{n: int(s.histLen.Load()), truncations: s.truncations.Load()}
}

// Rollback drops everything appended or generated since m from the history and the KV cache,
// so that the sequence continues as if it had stopped at m (a speculative turn that was not
// wanted). It fails with ErrBusy while an Append or Generate runs, and with ErrMarkLost when
// the history was truncated since m (the positions moved) or is already shorter.
func (s *Sequence) Rollback(ctx context.Context, m Mark) error {
	s.mu.Lock()
	closed, busy := s.closed, s.gen != nil
	s.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("rollback: %w", ErrClosed)
	case busy:
		return fmt.Errorf("rollback: %w", ErrBusy)
	}
	res := make(chan error, 1)
	if !s.r.enqueue(op{kind: opRollback, seq: s, mark: m, res: res}) {
		return fmt.Errorf("rollback: %w", ErrClosed)
	}
	select {
	case err := <-res:
		if err != nil {
			return fmt.Errorf("rollback: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("rollback: %w", ctx.Err())
	}
}

// Close aborts a running Generate, frees the KV slot and waits until it is free.
func (s *Sequence) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	g := s.gen
	s.mu.Unlock()
	if g != nil {
		g.stop()
	}
	done := make(chan struct{})
	if !s.r.enqueue(op{kind: opClose, seq: s, done: done}) {
		return
	}
	select {
	case <-done:
	case <-s.r.done:
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
