package requestclient

import (
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/stage"
)

// DefaultTurnDrainTimeout bounds how long an interrupted turn waits for the partial snapshots
// of its working stages before it is finalized with what it has. The stages report at once on
// abort (measured well under 100 ms), so the bound only matters when a stage is wedged.
const DefaultTurnDrainTimeout = 2 * time.Second

// turnState is the per-session turn bookkeeping of a DuplexRequest (vllm-omni's per-turn metrics with
// the differences docs/STATS.md lists). It exists only with LogStats on or Prometheus collectors
// set, so the off path costs nothing.
//
// Every stage message carries the stage turn it belongs to (listen rows carry the turn they
// lead to), so rows are routed by that number, not by arrival order: the open metrics turn is
// bound to one stage turn, rows of a later stage turn are the next turn's (pending), rows of an
// earlier one are stale. An interrupted turn (cancel, barge-in, close, abort) is not finalized
// when the session ends it: it moves to closing and is finalized when the stages report that
// stage turn finished (every working stage delivered its partial snapshot first), or after
// drain at the latest. Its state is O(stages × edges) whatever the session length: no
// session-scoped aggregator, no per-chunk rows.
type turnState struct {
	mu         sync.Mutex
	numStages  int
	clock      metrics.Clock
	log        *zap.Logger
	col        *metrics.Collectors
	onFinal    func(metrics.FinalizedRequest) string // Options.OnFinalized
	logStats   bool
	structured bool
	drain      time.Duration
	pending    *metrics.PendingTurn

	turn      *metrics.TurnMetrics // open turn, nil between turns
	turnN     int                  // the stage turn the open turn is bound to; 0 = not yet known
	closing   []*closingTurn       // interrupted turns waiting for their stages' partial rows
	lastEnded int                  // highest stage turn whose stages all finished
	lastDone  int                  // highest stage turn whose metrics turn was finalized
	barrier   float64              // listen rows submitted before it belong to cleared input
	closed    bool

	timers sync.WaitGroup // drain timers that may still run
}

type closingTurn struct {
	t      *metrics.TurnMetrics
	n      int
	reason string
	timer  *time.Timer
	// inputOnly: the turn's engine response never started (cancelled before its job started
	// it). It waits for the rows of the input it answered, which carry the upcoming stage turn
	// (n once the first arrived), until the stages report that input settled; that stage turn
	// stays open for the next response. cut is when SettleInput's barrier ran in the append
	// FIFO (0 before): every append of that input was processed by then, so a listen row
	// submitted later is the next input's.
	inputOnly bool
	cut       float64
}

func newTurnState(numStages int, clock metrics.Clock, log *zap.Logger, col *metrics.Collectors, logStats bool, drain time.Duration) *turnState {
	if drain <= 0 {
		drain = DefaultTurnDrainTimeout
	}
	return &turnState{
		numStages: max(numStages, 1),
		clock:     clock,
		log:       log,
		col:       col,
		logStats:  logStats,
		drain:     drain,
		pending:   metrics.NewPendingTurn(clock),
	}
}

// target is where a row of stage turn k goes: a closing turn bound to k, the open turn, the
// pending buffer (toPending), or nowhere (stale: its turn was finalized). k == 0 means the
// sender did not say (tests, chat-shaped callers): the open turn, else pending.
func (s *turnState) targetLocked(k int) (t *metrics.TurnMetrics, toPending bool) {
	if k > 0 {
		for _, c := range s.closing {
			if c.n == k && !c.inputOnly {
				return c.t, false
			}
		}
	}
	if s.turn != nil {
		switch {
		case k == 0 || s.turnN == k:
			return s.turn, false
		case s.turnN == 0 && k > s.lastDone:
			s.turnN = k
			if k <= s.lastEnded {
				s.turn.MarkStagesDone(0)
			}
			return s.turn, false
		case k > s.turnN:
			return nil, true
		default:
			return nil, false
		}
	}
	if k > 0 && k <= s.lastDone {
		return nil, false
	}
	return nil, true
}

func (s *turnState) ingest(k, stageID int, m metrics.StageRequestStats, finalOutputType string, submitTS float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.unstartedLocked(k, m, submitTS); c != nil {
		c.t.Accumulate(stageID, m, finalOutputType, submitTS)
		return
	}
	t, toPending := s.targetLocked(k)
	switch {
	case t != nil:
		t.Accumulate(stageID, m, finalOutputType, submitTS)
	case toPending:
		if submitTS > 0 && submitTS < s.barrier {
			return // work on input the client cleared
		}
		s.pending.Add(stageID, m, finalOutputType, submitTS)
	default:
		s.log.Debug("dropping stage metrics of a finalized turn",
			zap.Int("stage", stageID), zap.Int("stage_turn", k))
	}
}

// unstartedLocked returns the inputOnly closing turn a row of stage turn k belongs to: a row
// of the input it answered, that is of the stage turn it is bound to (or, unbound, of one not
// finalized yet) and not of input given after its cancel. The prefill of history committed
// before the cancel runs later, so a row with prompt tokens is the turn's whenever it comes
// before the input settled.
func (s *turnState) unstartedLocked(k int, m metrics.StageRequestStats, submitTS float64) *closingTurn {
	if k <= 0 {
		return nil
	}
	for _, c := range s.closing {
		if !c.inputOnly || (c.n != k && (c.n != 0 || k <= s.lastDone)) {
			continue
		}
		if c.cut > 0 && submitTS > c.cut && m.NumTokensIn == 0 {
			return nil
		}
		c.n = k
		return c
	}
	return nil
}

func (s *turnState) output(m stage.OutputMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.Kind == stage.Decision {
		if m.Decision == stage.DecisionSpeak {
			// The engine's own endpoint ends the input when no speech_stopped / commit did.
			s.pending.MarkInputEndIfUnset(m.StageSubmitTS)
		}
		return
	}
	if m.Kind != stage.Audio && m.Kind != stage.Text {
		return
	}
	if t, _ := s.targetLocked(m.Turn); t != nil {
		t.MarkFirstOutput(m.StageID, s.clock(), m.Kind == stage.Audio)
	}
}

func (s *turnState) transfer(e stage.TransferEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, _ := s.targetLocked(e.Turn); t != nil {
		t.AddTransfer(e.From, e.To, e.SizeBytes, e.TxMs, e.BlockedMs, e.UsedShm)
	}
}

// turnEnd is the stages' report that stage turn n is finished: every stage that worked for it
// delivered its (partial) snapshot before this.
func (s *turnState) turnEnd(n int) {
	s.mu.Lock()
	s.lastEnded = max(s.lastEnded, n)
	if s.turn != nil && s.turnN == n {
		s.turn.MarkStagesDone(0)
	}
	var done []*closingTurn
	s.closing = slices.DeleteFunc(s.closing, func(c *closingTurn) bool {
		if c.n > 0 && c.n <= n {
			c.t.MarkStagesDone(0)
			done = append(done, c)
			return true
		}
		return false
	})
	s.settleLocked(done)
	s.mu.Unlock()
	s.finishAll(done)
}

// bind ties the oldest unbound turn to stage turn n (Respond returned n): a turn cancelled
// before its engine response started is finalized as soon as that response's stages are done.
func (s *turnState) bind(n int) {
	s.mu.Lock()
	var done []*closingTurn
	bound := false
	for i, c := range s.closing {
		if c.n == 0 && !c.inputOnly {
			c.n, bound = n, true
			if n <= s.lastEnded {
				done = append(done, c)
				s.closing = slices.Delete(s.closing, i, i+1)
			}
			break
		}
	}
	if !bound && s.turn != nil && s.turnN == 0 {
		s.turnN = n
		if n <= s.lastEnded {
			s.turn.MarkStagesDone(0)
		}
	}
	s.settleLocked(done)
	s.mu.Unlock()
	s.finishAll(done)
}

// orphan marks stage turn n as belonging to no metrics turn (a response the session cancelled
// before it learnt its number): its rows are dropped, and a turn bound to it by mistake is
// unbound.
func (s *turnState) orphan(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.closing {
		if c.n == n {
			return // it is that closing turn's own work
		}
	}
	if s.turn != nil && s.turnN == n {
		s.turnN = 0
	}
	s.lastDone = max(s.lastDone, n)
}

// noEngineTurn finalizes unbound closing turns now: their engine response never started.
func (s *turnState) noEngineTurn() {
	s.mu.Lock()
	var done []*closingTurn
	s.closing = slices.DeleteFunc(s.closing, func(c *closingTurn) bool {
		if c.n == 0 && !c.inputOnly {
			done = append(done, c)
			return true
		}
		return false
	})
	s.settleLocked(done)
	s.mu.Unlock()
	s.finishAll(done)
}

// settleLocked stops the drain timers of turns leaving closing and advances lastDone (not for
// an inputOnly turn: its stage turn is the next response's).
func (s *turnState) settleLocked(done []*closingTurn) {
	for _, c := range done {
		if c.timer != nil && c.timer.Stop() {
			s.timers.Done() // the timer will not run
		}
		if !c.inputOnly {
			s.lastDone = max(s.lastDone, c.n)
		}
	}
}

// inputSettled is the stages' report that every row of the input given before stage turn k's
// SettleInput was delivered: the inputOnly turns waiting for it are finalized.
func (s *turnState) inputSettled(k int) {
	s.mu.Lock()
	var done []*closingTurn
	s.closing = slices.DeleteFunc(s.closing, func(c *closingTurn) bool {
		if c.inputOnly && c.n <= k {
			done = append(done, c)
			return true
		}
		return false
	})
	s.settleLocked(done)
	s.mu.Unlock()
	s.finishAll(done)
}

func (s *turnState) expire(c *closingTurn) {
	defer s.timers.Done()
	s.mu.Lock()
	i := slices.Index(s.closing, c)
	if i < 0 {
		s.mu.Unlock()
		return
	}
	s.closing = slices.Delete(s.closing, i, i+1)
	if !c.inputOnly {
		s.lastDone = max(s.lastDone, c.n)
	}
	s.mu.Unlock()
	s.log.Debug("finalizing an interrupted turn before all stages reported",
		zap.String("response_id", c.t.ResponseID()), zap.Int("stage_turn", c.n), zap.Duration("waited", s.drain))
	s.finish(c.t, c.reason)
}

func (s *turnState) finishAll(cs []*closingTurn) {
	for _, c := range cs {
		s.finish(c.t, c.reason)
	}
}

func (s *turnState) finish(t *metrics.TurnMetrics, reason string) bool {
	ok := t.Finalize(reason, s.log, s.logStats)
	if ok && s.col != nil {
		if rec, have := t.Record(); have {
			if s.onFinal != nil {
				rec.TraceID = s.onFinal(rec)
			}
			s.col.ObserveFinalized(rec)
		}
	}
	return ok
}

func (s *turnState) begin(rid, responseID string, turnID int, arrival float64) {
	s.mu.Lock()
	if s.turn != nil {
		if s.turn.ResponseID() == responseID {
			s.mu.Unlock()
			return
		}
		old := s.turn
		s.turn, s.turnN = nil, 0
		s.mu.Unlock()
		s.finish(old, metrics.ReasonAbort)
		s.mu.Lock()
	}
	s.turn = s.pending.BeginTurn(rid, responseID, turnID, arrival, s.numStages, nil)
	s.turn.SetStructuredRecords(s.structured)
	s.turnN = 0
	s.mu.Unlock()
}

// interrupted reports a finished_reason after which the stages may still be working.
func interrupted(reason string) bool {
	switch metrics.NormalizeFinishedReason(reason) {
	case metrics.ReasonStop, metrics.ReasonLength:
		return false
	}
	return true
}

// finalize ends the open turn with reason. A natural end (stop, length) is finalized now: its
// stages already reported. An interrupted turn waits, bounded by drain, for its stages'
// partial snapshots (see turnState). It returns false when no turn was open. The pending stamp
// of the next turn, if one was set after this turn opened, survives: on an auto-response handoff
// it is the next turn's t0.
//
// mayStart says an engine response may still start for an unbound turn (a Respond call is in
// progress); without one an unbound turn has no stage work to wait for.
func (s *turnState) finalize(reason string, mayStart bool) bool {
	s.mu.Lock()
	t, n := s.turn, s.turnN
	s.turn, s.turnN = nil, 0
	if t == nil {
		s.mu.Unlock()
		return false
	}
	if interrupted(reason) {
		t.MarkStagesDone(0) // generation ends at the interruption (keep-first: earlier if done)
	}
	if !interrupted(reason) || s.closed || (n > 0 && n <= s.lastEnded) || (n == 0 && !mayStart) {
		s.lastDone = max(s.lastDone, n)
		s.mu.Unlock()
		return s.finish(t, reason)
	}
	c := &closingTurn{t: t, n: n, reason: reason}
	s.timers.Add(1)
	c.timer = time.AfterFunc(s.drain, func() { s.expire(c) })
	s.closing = append(s.closing, c)
	s.mu.Unlock()
	return true
}

// finalizeUnstarted ends the open turn of a response cancelled before its engine response
// started (the session's job will not start it): there is no stage turn to wait for, but the
// input it answered may still be on its way (its transcription and prefill queued behind the
// cancel). The turn keeps that input's rows and is finalized when the stages report the input
// settled (inputSettled), after drain at the latest, or at close.
func (s *turnState) finalizeUnstarted(reason string) bool {
	s.mu.Lock()
	t, n := s.turn, s.turnN
	s.turn, s.turnN = nil, 0
	if t == nil {
		s.mu.Unlock()
		return false
	}
	t.MarkStagesDone(0)
	if s.closed {
		s.mu.Unlock()
		return s.finish(t, reason)
	}
	c := &closingTurn{t: t, n: n, reason: reason, inputOnly: true}
	s.timers.Add(1)
	// Its input may still wait behind queued engine work, which the FIFO's stall bound limits.
	c.timer = time.AfterFunc(s.drain+MaxInputStall, func() { s.expire(c) })
	s.closing = append(s.closing, c)
	s.mu.Unlock()
	return true
}

// settleCut runs in the append FIFO, after every append of the input the waiting inputOnly
// turns answered: listen rows submitted from now on are the next input's.
func (s *turnState) settleCut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	for _, c := range s.closing {
		if c.inputOnly && c.cut == 0 {
			c.cut = now
		}
	}
}

// flush finalizes every closing turn now (the stream is closed: nothing more will arrive) and
// waits for drain timers that already fired.
func (s *turnState) flush() {
	s.mu.Lock()
	s.closed = true
	done := s.closing
	s.closing = nil
	s.settleLocked(done)
	s.mu.Unlock()
	s.finishAll(done)
	s.timers.Wait()
	s.pending.Reset()
}

// markInputEnd records the end of the next turn's user input.
func (s *turnState) markInputEnd(ts float64) {
	s.pending.MarkInputEnd(ts)
}

// clearInput is input_audio_buffer.clear: the next turn's stamp, input end and buffered rows
// are dropped now.
func (s *turnState) clearInput() {
	s.pending.ClearInput()
}

// clearBarrier runs in the append FIFO after every append made before the clear: rows of those
// appends that are still on their way (submitted before now) are dropped when they arrive.
func (s *turnState) clearBarrier() {
	s.mu.Lock()
	s.barrier = s.clock()
	s.mu.Unlock()
	s.pending.DropRows()
}

func (s *turnState) setDelivered(audioS, underrunS float64) {
	s.mu.Lock()
	t := s.turn
	s.mu.Unlock()
	t.SetDelivered(audioS, s.clock())
	t.SetUnderrun(underrunS)
}

func (s *turnState) setPlayed(playedS float64) {
	s.mu.Lock()
	t := s.turn
	s.mu.Unlock()
	t.SetPlayed(playedS)
}

func (s *turnState) setDetached(ms float64) {
	s.mu.Lock()
	t := s.turn
	s.mu.Unlock()
	t.SetDetached(ms)
}

// openTurn returns the open turn (tests).
func (s *turnState) openTurn() *metrics.TurnMetrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.turn
}

// turnRecordArrival returns the open turn's t0 (tests).
func (s *turnState) turnRecordArrival() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.turn == nil {
		return 0
	}
	return s.turn.Arrival()
}
