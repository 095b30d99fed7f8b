package gpu

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ollama/ollama/llama"
	"go.uber.org/zap"
)

// outCap bounds the tokens a Generate may have produced but its caller not yet consumed; a
// sequence whose buffer is full sits out of the batch (others keep decoding) until it drains.
const outCap = 64

// Runner owns one model and one llama.cpp context. A single scheduler goroutine, locked to
// its OS thread, owns the context; callers talk to it through a queue of operations.
type Runner struct {
	cfg Config
	log *zap.Logger
	// onPanic counts a recovered scheduler panic (SetPanicCounter; the collectors are built
	// after the model loads).
	onPanic atomic.Pointer[func(component string)]
	info    ModelInfo
	chat    chatTemplate
	model   *llama.Model
	lctx    *llama.Context
	batch   *llama.Batch
	bos     int // -1 when the model has none
	addBOS  bool
	vocab   int
	// dummyEnd: a generated dummy model, whose replies end at a drawn length (dummyend.go).
	dummyEnd bool

	mu     sync.Mutex
	closed bool
	ops    []op
	slots  []bool      // KV sequence ids in use
	bySlot []*Sequence // the open sequence of each slot (KVStats)
	live   int
	// kvFull counts decode steps that found the shared KV cache full (KVStats).
	kvFull atomic.Int64
	// decodeErrors counts decode steps that failed for another reason (KVStats).
	decodeErrors atomic.Int64
	// refusedSlots and refusedKV count Opens refused for want of a slot or of KV cells
	// (guarded by mu).
	refusedSlots, refusedKV int64
	wake                    chan struct{} // cap 1: "ops queued or closing"
	done                    chan struct{} // closed when the scheduler has exited and freed the context

	// Owned by the scheduler goroutine.
	seqs     []*Sequence
	rr       int
	batchID  atomic.Int64
	parts    []part
	canShift bool

	gvOnce sync.Once
	gv     *grammarVocab // the vocabulary as grammars see it, built on first use

	maxPieceOnce sync.Once
	maxPiece     int // bytes of the longest token text (CountTokens)

	turnEndOnce sync.Once
	turnEnd     UserTurnEnd // the chat template's end of a user message (UserTurnEnd)
	turnEndErr  error
}

type opKind int

const (
	opAdd opKind = iota
	opAppend
	opGenerate
	opAbort
	opClose
	opRollback
	opScore
	opForget
)

type op struct {
	kind opKind
	seq  *Sequence
	app  *appendJob
	gen  *genJob
	keep bool
	done chan struct{} // opClose: closed once the slot is free
	mark Mark          // opRollback: where the history goes back to
	res  chan error    // opRollback, opForget: the outcome (cap 1)
	span [2]int        // opForget: the positions [from, to) dropped
	// opScore: a NextTokenProb call (turnend.go)
	score *scoreJob
}

func newRunner(cfg Config, model *llama.Model, lctx *llama.Context, log *zap.Logger, dummy bool) (*Runner, error) {
	batch, err := llama.NewBatch(cfg.BatchSize, 1, 0)
	if err != nil {
		return nil, fmt.Errorf("allocate batch: %w", err)
	}
	r := &Runner{
		cfg: cfg, log: log, model: model, lctx: lctx, batch: batch,
		bos: -1, addBOS: model.AddBOSToken(), vocab: model.NumVocab(),
		dummyEnd: dummy && model.TokenIsEog(dummyEOS),
		slots:    make([]bool, cfg.MaxSequences),
		bySlot:   make([]*Sequence, cfg.MaxSequences),
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		canShift: lctx.KvCacheCanShift(),
	}
	// The binding has no BOS accessor; tokenizing "" with specials yields exactly [BOS].
	if toks, err := model.Tokenize("", true, false); err == nil && len(toks) == 1 {
		r.bos = toks[0]
	}
	if r.bos < 0 {
		r.addBOS = false
	}
	started := make(chan struct{})
	go r.loop(started)
	<-started
	return r, nil
}

// Close stops the scheduler (running Generates end with ErrClosed), frees the context and
// the model, and waits for all of it. Safe to call more than once.
func (r *Runner) Close() error {
	r.mu.Lock()
	already := r.closed
	r.closed = true
	r.mu.Unlock()
	if !already {
		r.signal()
	}
	<-r.done
	return nil
}

// KVStats is the shared KV cache's state: its planned capacity, what the open sequences hold,
// and how often a decode found it full (each time the longest sequence was truncated, or failed
// with ErrContextFull under the error policy).
type KVStats struct {
	Cells         int   // Config.ContextSize: cells shared by all sequences
	CellsHeld     int   // tokens the open sequences hold now
	SeqContext    int   // the most one sequence may hold
	Sequences     int   // open sequences
	MaxSequences  int   // Config.MaxSequences
	FullEvents    int64 // decode steps that found the cache full, since load
	WorstCaseHeld int   // the open sequences' reserved windows: what they may grow to
	RefusedSlots  int64 // Opens refused because MaxSequences sequences were live, since load
	RefusedKV     int64 // Opens refused because the cache could not reserve the window, since load
	DecodeErrors  int64 // decode steps that failed for another reason than a full cache (ErrDecode), since load
}

// KVStats reports the KV cache's state; it is safe to call from any goroutine.
func (r *Runner) KVStats() KVStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := KVStats{Cells: r.cfg.ContextSize, SeqContext: r.cfg.SeqContext, Sequences: r.live,
		MaxSequences: r.cfg.MaxSequences, FullEvents: r.kvFull.Load(), DecodeErrors: r.decodeErrors.Load(),
		RefusedSlots: r.refusedSlots, RefusedKV: r.refusedKV}
	for _, s := range r.bySlot {
		if s != nil {
			st.CellsHeld += int(s.histLen.Load())
			st.WorstCaseHeld += s.opts.MaxContext
		}
	}
	return st
}

// LiveSequences counts open sequences (KV slots in use).
func (r *Runner) LiveSequences() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live
}

func (r *Runner) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// enqueue hands an operation to the scheduler; false when the runner is closed.
func (r *Runner) enqueue(o op) bool {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false
	}
	r.ops = append(r.ops, o)
	r.mu.Unlock()
	r.signal()
	return true
}

// Open starts a sequence in a free KV slot.
func (r *Runner) Open(ctx context.Context, opts SeqOptions) (*Sequence, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts.MaxContext <= 0 || opts.MaxContext > r.cfg.SeqContext {
		opts.MaxContext = r.cfg.SeqContext
	}
	// Truncation must leave room for at least one prefill chunk after the kept prefix.
	opts.KeepPrefix = max(0, min(opts.KeepPrefix, opts.MaxContext-min(r.cfg.PrefillChunk, opts.MaxContext/2)-1))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	slot := -1
	for i, used := range r.slots {
		if !used {
			slot = i
			break
		}
	}
	if slot < 0 {
		r.refusedSlots++
		return nil, ErrNoFreeSlot
	}
	// A sequence reserves its whole window: the open sequences' windows never add up to more
	// than the cache, so a decode never finds it full and no conversation gives way to another.
	reserved := 0
	for _, s := range r.bySlot {
		if s != nil {
			reserved += s.opts.MaxContext
		}
	}
	if reserved+opts.MaxContext > r.cfg.ContextSize {
		r.refusedKV++
		return nil, fmt.Errorf("%w: %d of %d cells are reserved by %d sequences, this one needs %d",
			ErrKVReserved, reserved, r.cfg.ContextSize, r.live, opts.MaxContext)
	}
	r.slots[slot] = true
	r.live++
	s := &Sequence{r: r, slot: slot, opts: opts}
	r.bySlot[slot] = s
	r.ops = append(r.ops, op{kind: opAdd, seq: s})
	r.signal()
	return s, nil
}

func (r *Runner) freeSlot(slot int) {
	r.mu.Lock()
	r.slots[slot] = false
	r.bySlot[slot] = nil
	r.live--
	r.mu.Unlock()
}

// loop is the scheduler. It owns the llama context for its whole life.
func (r *Runner) loop(started chan<- struct{}) {
	// llama.cpp contexts are not thread-safe and its CPU backend keeps per-thread state;
	// one locked thread makes every C call come from the same place.
	runtime.LockOSThread()
	defer close(r.done)
	defer r.shutdown()
	close(started)
	for {
		if !r.applyOps() {
			return
		}
		if r.safeStep() {
			continue
		}
		<-r.wake
	}
}

// applyOps applies queued operations; false when the runner is closing.
func (r *Runner) applyOps() bool {
	r.mu.Lock()
	ops := r.ops
	r.ops = nil
	closed := r.closed
	r.mu.Unlock()
	for _, o := range ops {
		if closed {
			r.rejectOp(o, ErrClosed)
			continue
		}
		r.apply(o)
	}
	return !closed
}

func (r *Runner) rejectOp(o op, err error) {
	switch o.kind {
	case opAppend:
		o.app.res <- err
	case opGenerate:
		o.gen.done <- genDone{reason: "abort", err: err}
	case opClose:
		close(o.done)
	case opRollback, opForget:
		o.res <- err
	case opScore:
		o.score.res <- scoreResult{err: err}
	}
}

// shutdown fails everything still in flight and frees the C state, on the scheduler thread.
func (r *Runner) shutdown() {
	r.mu.Lock()
	r.closed = true
	ops := r.ops
	r.ops = nil
	r.mu.Unlock()
	for _, o := range ops {
		r.rejectOp(o, ErrClosed)
	}
	for _, s := range r.seqs {
		r.failSeq(s, ErrClosed)
		s.schedClosed = true
	}
	r.seqs = nil
	r.batch.Free()
	freeContext(r.lctx)
	llama.FreeModel(r.model)
}

// SetPanicCounter sets the counter of scheduler panics (omniserve_panics_total{component="engine"}).
func (r *Runner) SetPanicCounter(count func(component string)) { r.onPanic.Store(&count) }

// safeStep is the scheduler goroutine's per-step root: it runs one step; a Go panic inside it fails the sequences of that step instead of
// killing the server.
func (r *Runner) safeStep() (worked bool) {
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("%w: %v", ErrPanic, p)
			r.log.Error("scheduler step failed", zap.Error(err), zap.Stack("stack"))
			if f := r.onPanic.Load(); f != nil {
				(*f)("engine")
			}
			for _, pt := range r.parts {
				r.failSeq(pt.seq, err)
			}
			r.parts = r.parts[:0]
			worked = true
		}
	}()
	return r.step()
}

// wallSeconds is the wall clock as unix seconds (the statistics clock of the project).
func wallSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
