package gpu

import (
	"context"
	"fmt"
	"slices"

	"go.uber.org/zap"
)

// Forget drops the history positions [from, to) from the sequence and its KV cache: the
// tokens after them move down (a KV shift where the cache supports it, else they are queued
// for re-prefill, as the overflow truncation does), so the sequence reads as if the dropped
// span had never been there. The caller drops a conversation's oldest turns this way and
// keeps the prefix before from (the instructions) cached. Like Rollback it needs the
// sequence idle (ErrBusy while an Append or Generate runs), and it loses every Mark taken
// before it (the positions moved). A span past the history's end is ErrMarkLost.
func (s *Sequence) Forget(ctx context.Context, from, to int) error {
	if from < 0 || to < from {
		return fmt.Errorf("forget: span [%d, %d): %w", from, to, ErrMarkLost)
	}
	s.mu.Lock()
	closed, busy := s.closed, s.gen != nil
	s.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("forget: %w", ErrClosed)
	case busy:
		return fmt.Errorf("forget: %w", ErrBusy)
	case from == to:
		return nil
	}
	res := make(chan error, 1)
	if !s.r.enqueue(op{kind: opForget, seq: s, span: [2]int{from, to}, res: res}) {
		return fmt.Errorf("forget: %w", ErrClosed)
	}
	select {
	case err := <-res:
		if err != nil {
			return fmt.Errorf("forget: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("forget: %w", ctx.Err())
	}
}

// applyForget drops [from, to) of s's history on the scheduler goroutine (Forget).
func (r *Runner) applyForget(s *Sequence, from, to int) error {
	switch {
	case s.schedClosed:
		return ErrClosed
	case s.active != nil || len(s.waiters) > 0:
		return ErrBusy
	case to > s.logicalLen():
		return ErrMarkLost
	}
	s.truncations.Add(1)
	if h := len(s.history); to > h {
		// The span reaches into the tokens not decoded yet: those are simply not queued.
		lo := max(from, h) - h
		s.pending = slices.Delete(s.pending, lo, to-h)
		s.reprefill = min(s.reprefill, lo)
		to = max(from, h)
	}
	if to > from {
		r.forgetDecoded(s, from, to)
	}
	// Nothing waits on the sequence: the append counters restart from what is decoded.
	s.queued = s.prefilled + int64(len(s.pending)-s.reprefill)
	s.histLen.Store(int64(s.logicalLen()))
	return nil
}

// forgetDecoded drops the decoded positions [from, to) of s: a KV shift of what follows, or
// without one the tail queued for re-prefill.
func (r *Runner) forgetDecoded(s *Sequence, from, to int) {
	h := len(s.history)
	if r.canShift {
		r.lctx.KvCacheSeqRm(s.slot, from, to)
		r.lctx.KvCacheSeqAdd(s.slot, to, h, from-to)
		s.history = slices.Delete(s.history, from, to)
	} else {
		r.lctx.KvCacheSeqRm(s.slot, from, -1)
		tail := append([]int(nil), s.history[to:]...)
		s.history = s.history[:from]
		s.pending = append(tail, s.pending...)
		s.reprefill += len(tail)
	}
	r.log.Debug("sequence span forgotten", zap.Int("seq", s.slot), zap.Int("from", from), zap.Int("dropped", to-from), zap.Bool("shift", r.canShift))
}
