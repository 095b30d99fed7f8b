package requestclient

import (
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/stage"
)

// turnState is the per-session turn bookkeeping of a DuplexRequest (vllm-omni's per-turn metrics
// with the differences docs/STATS.md lists). It exists only with LogStats on or Prometheus
// collectors set, so the off path costs nothing.
//
// A turn has one id from its first input to its record: the session numbers turns and passes
// the id down with every input and with Respond, and the stages tag every row, output,
// transfer and TurnEnd with it. Rows are routed by that id alone. The session owns the turn: it
// closes it once with its reason (FinalizeTurn, FinalizeUnstartedTurn), and the record is made
// when the stages reported: at once for a natural end (stop, length: the stages reported
// before the last output), when TurnEnd(id) arrives for an interrupted turn whose response
// started, when InputSettled(id) arrives for one whose response never started, or when the
// stream closes. No timer decides anything. The state is O(open turns × stages) however long
// the session: no session-scoped aggregator, no per-chunk rows.
type turnState struct {
	mu         sync.Mutex
	numStages  int
	clock      metrics.Clock
	log        *zap.Logger
	col        *metrics.Collectors
	onFinal    func(metrics.FinalizedRequest) string // Options.OnFinalized
	logStats   bool
	structured bool

	open   map[int]*turnEntry // turns not recorded yet, by id
	floor  int                // highest id recorded or abandoned: its rows are dropped
	closed bool               // the stream closed: a turn closed from now on is recorded at once
	// unowned lists turns that were recorded without their owner closing them (a newer turn
	// began first): a bug in the caller, reported by Unclosed.
	unowned []int
}

// turnEntry is one turn between its first input and its record.
type turnEntry struct {
	id int
	t  *metrics.TurnMetrics // born at the first input; its response attached at BeginTurn

	reason  string // the owner's close reason ("" while open)
	closing bool   // the owner closed it; the record waits for the stages' report
	// unstarted: closed by FinalizeUnstartedTurn, its record waits for InputSettled(id).
	unstarted bool
	// started: a stage response runs under this id (Respond returned it, or the stream's own
	// speak decision announced it); responding counts Respond calls in flight for it.
	started    bool
	responding int
	stagesDone float64 // when TurnEnd(id) arrived; 0 = not yet
}

func newTurnState(numStages int, clock metrics.Clock, log *zap.Logger, col *metrics.Collectors, logStats bool) *turnState {
	return &turnState{
		numStages: max(numStages, 1),
		clock:     clock,
		log:       log,
		col:       col,
		logStats:  logStats,
		open:      map[int]*turnEntry{},
	}
}

// entryLocked returns turn id's entry, born now with t0 arrival (<= 0: now) unless it exists or
// the id is over (recorded or abandoned: nil).
func (s *turnState) entryLocked(id int, rid string, arrival float64) *turnEntry {
	if e := s.open[id]; e != nil {
		return e
	}
	if id <= s.floor {
		return nil
	}
	e := &turnEntry{id: id, t: metrics.NewInputTurn(rid, arrival, s.numStages, s.clock)}
	e.t.SetStructuredRecords(s.structured)
	s.open[id] = e
	return e
}

// routeLocked is the entry a row of turn k goes to: k's own, or nil (its turn is over, or no
// input of it was stamped: work before the user began, which belongs to no turn). k <= 0 means
// the sender did not say (tests, chat-shaped callers): the newest turn.
func (s *turnState) routeLocked(k int) *turnEntry {
	if k <= 0 {
		for id := range s.open {
			k = max(k, id)
		}
	}
	return s.open[k]
}

func (s *turnState) ingest(k, stageID int, m metrics.StageRequestStats, finalOutputType string, submitTS float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.routeLocked(k); e != nil {
		e.t.Accumulate(stageID, m, finalOutputType, submitTS)
		return
	}
	s.log.Debug("dropping stage metrics of no open turn", zap.Int("stage", stageID), zap.Int("turn", k))
}

func (s *turnState) output(m stage.OutputMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.routeLocked(m.Turn)
	if e == nil {
		return
	}
	if m.Kind == stage.Decision {
		if m.Decision == stage.DecisionSpeak {
			// The stream answered the input by itself: its response runs under this id, and
			// the engine's own endpoint ends the input when no speech_stopped / commit did.
			e.started = true
			e.t.MarkInputEndIfUnset(m.StageSubmitTS)
		}
		return
	}
	if m.Kind == stage.Audio || m.Kind == stage.Text {
		e.started = true // only a response speaks
		e.t.MarkFirstOutput(m.StageID, s.clock(), m.Kind == stage.Audio)
	}
}

func (s *turnState) transfer(ev stage.TransferEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.routeLocked(ev.Turn); e != nil {
		e.t.AddTransfer(ev.From, ev.To, ev.SizeBytes, ev.TxMs, ev.BlockedMs, ev.UsedShm)
	}
}

// turnEnd is the stages' report that turn n's response is finished: every stage that worked
// for it delivered its (partial) snapshot before this.
func (s *turnState) turnEnd(n int) {
	s.mu.Lock()
	e := s.open[n]
	if e == nil {
		s.mu.Unlock()
		return
	}
	e.stagesDone = s.clock()
	e.t.MarkStagesDone(e.stagesDone)
	if !e.closing || e.unstarted {
		s.mu.Unlock()
		return
	}
	s.recordUnlock(e)
}

// inputSettled is the stages' report that every row of the input of turn k given before
// SettleInput was delivered: a turn closed before its response started is recorded now.
func (s *turnState) inputSettled(k int) {
	s.mu.Lock()
	var done []*turnEntry
	for id, e := range s.open {
		if id <= k && e.closing && e.unstarted {
			done = append(done, e)
		}
	}
	s.recordAllLocked(done)
	s.mu.Unlock()
	s.finishAll(done)
}

// respondStart and respondEnd bracket a Respond call for turn id; n is the id the stream ran
// the response under (0 on failure). A closed turn whose response cannot start any more is
// recorded at once: there is no stage work to wait for.
func (s *turnState) respondStart(id int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.open[id]; e != nil {
		e.responding++
	}
}

func (s *turnState) respondEnd(id, n int) {
	s.mu.Lock()
	e := s.open[id]
	if e != nil {
		e.responding--
	}
	if n > 0 {
		if en := s.open[n]; en != nil {
			en.started = true
		}
	}
	if e == nil || !e.closing || e.unstarted || e.started || e.responding > 0 {
		s.mu.Unlock()
		return
	}
	s.recordUnlock(e)
}

// recordLocked takes e out of the open turns; finish (outside the lock) makes its record.
func (s *turnState) recordLocked(e *turnEntry) {
	delete(s.open, e.id)
	s.floor = max(s.floor, e.id)
}

func (s *turnState) recordAllLocked(es []*turnEntry) {
	slices.SortFunc(es, func(a, b *turnEntry) int { return a.id - b.id })
	for _, e := range es {
		s.recordLocked(e)
	}
}

func (s *turnState) finishAll(es []*turnEntry) {
	for _, e := range es {
		s.finish(e)
	}
}

// finish makes e's one record: the tables, the structured record, Prometheus.
func (s *turnState) finish(e *turnEntry) {
	if e.t.Finalize(e.reason, s.log, s.logStats) {
		observeTurn(e.t, s.col, s.onFinal)
	}
}

// markArrival is turn id's first input: the turn is born with t0 ts (<= 0: now) unless it
// already was (keep first). It returns the turn's t0; an id that is over gets ts back.
func (s *turnState) markArrival(id int, rid string, ts float64) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ts <= 0 {
		ts = s.clock()
	}
	if e := s.entryLocked(id, rid, ts); e != nil {
		return e.t.Arrival()
	}
	return ts
}

// arrival returns turn id's t0 when the turn is open.
func (s *turnState) arrival(id int) (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.open[id]; e != nil {
		return e.t.Arrival(), true
	}
	return 0, false
}

// begin attaches responseID to turn id (born now, at arrival, when no input came first); a
// second call does nothing. A begun older turn its owner never closed is recorded with reason
// abort and reported by Unclosed; older turns whose response never began are dropped (their
// input was answered by none).
func (s *turnState) begin(id int, rid, responseID string, turnID int, arrival float64) {
	s.mu.Lock()
	e := s.entryLocked(id, rid, arrival) // a response with no new input: born at its begin
	if e == nil || !e.t.Begin(responseID, turnID) {
		s.mu.Unlock()
		return
	}
	var stale []*turnEntry
	for oid, o := range s.open {
		switch {
		case oid >= id || o.closing:
		case !o.t.Begun():
			delete(s.open, oid)
		default:
			o.closing, o.reason = true, metrics.ReasonAbort
			s.unowned = append(s.unowned, oid)
			stale = append(stale, o)
		}
	}
	s.recordAllLocked(stale)
	s.mu.Unlock()
	for _, o := range stale {
		s.log.Warn("a turn was never closed by its owner; recording it as aborted",
			zap.Int("turn", o.id), zap.String("response_id", o.t.ResponseID()))
		s.finish(o)
	}
}

// interrupted reports a finished_reason after which the stages may still be working.
func interrupted(reason string) bool {
	switch metrics.NormalizeFinishedReason(reason) {
	case metrics.ReasonStop, metrics.ReasonLength:
		return false
	}
	return true
}

// finalize is the owner's close of turn id with reason; closing twice is a no-op (false). A
// natural end (stop, length) is recorded now: its stages already reported. An interrupted turn
// is recorded when its stages report its response finished (TurnEnd), at once when none runs
// or can still start, or when the stream closes. It returns false when the turn was not open.
func (s *turnState) finalize(id int, reason string) bool {
	s.mu.Lock()
	e := s.closeLocked(id, reason)
	if e == nil {
		s.mu.Unlock()
		return false
	}
	if interrupted(reason) {
		e.t.MarkStagesDone(0) // generation ends at the interruption (keep-first: earlier if done)
	}
	if interrupted(reason) && !s.closed && e.stagesDone == 0 && (e.started || e.responding > 0) {
		s.mu.Unlock()
		return true
	}
	s.recordUnlock(e)
	return true
}

// closeLocked marks turn id closing with reason and returns it, or nil when its owner cannot
// close it (unknown, not begun, or already closing). s.mu is held.
func (s *turnState) closeLocked(id int, reason string) *turnEntry {
	e := s.open[id]
	if e == nil || !e.t.Begun() || e.closing {
		return nil
	}
	e.closing, e.reason = true, reason
	return e
}

// recordUnlock records e, releases s.mu, then finishes e outside the lock (finish calls out).
func (s *turnState) recordUnlock(e *turnEntry) {
	s.recordLocked(e)
	s.mu.Unlock()
	s.finish(e)
}

// current is the newest begun turn its owner has not closed (0: none).
func (s *turnState) current() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, e := range s.open {
		if !e.closing && e.t.Begun() {
			n = max(n, id)
		}
	}
	return n
}

// finalizeUnstarted is the owner's close of turn id whose response was cancelled before it
// started (and never will): no response runs, but the input it answered may still be on its
// way (its transcription and prefill queued behind the cancel). The turn keeps that input's
// rows and is recorded when the stages report the input settled (inputSettled), or at close.
func (s *turnState) finalizeUnstarted(id int, reason string) bool {
	s.mu.Lock()
	e := s.closeLocked(id, reason)
	if e == nil {
		s.mu.Unlock()
		return false
	}
	e.unstarted = true
	e.t.MarkStagesDone(0)
	if !s.closed {
		s.mu.Unlock()
		return true
	}
	s.recordUnlock(e)
	return true
}

// settleFailed records turn id now: the stages cannot report its input settled.
func (s *turnState) settleFailed(id int) {
	s.mu.Lock()
	e := s.open[id]
	if e == nil || !e.unstarted {
		s.mu.Unlock()
		return
	}
	s.recordUnlock(e)
}

// flush records every turn still open with the reason it was closed with (reason for one never
// closed: the stream's close is its owner's) and drops the input of turns never begun. The
// stream is closed: nothing more will arrive.
func (s *turnState) flush(reason string) {
	s.mu.Lock()
	s.closed = true
	var done []*turnEntry
	for id, e := range s.open {
		if !e.t.Begun() {
			delete(s.open, id) // input no response answered: no record
			continue
		}
		if !e.closing {
			e.closing, e.reason = true, reason
		}
		done = append(done, e)
	}
	s.recordAllLocked(done)
	s.mu.Unlock()
	s.finishAll(done)
}

// markInputEnd records the end of turn id's user input.
func (s *turnState) markInputEnd(id int, ts float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.open[id]; e != nil {
		if ts <= 0 {
			ts = s.clock()
		}
		e.t.MarkInputEnd(ts)
	}
}

// abandon is input_audio_buffer.clear: turn id's input is dropped with its stamp, input end and
// rows, and rows of it still on their way are dropped when they arrive (the session gives its
// next input a new id). A turn whose response began keeps its rows.
func (s *turnState) abandon(id int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.open[id]; e != nil && e.t.Begun() {
		return
	}
	delete(s.open, id)
	s.floor = max(s.floor, id)
}

// begun returns turn id's metrics once its response began (nil before, and once recorded).
func (s *turnState) begun(id int) *metrics.TurnMetrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.open[id]; e != nil && e.t.Begun() {
		return e.t
	}
	return nil
}

func (s *turnState) setDelivered(id int, audioS, underrunS float64) {
	t := s.begun(id)
	t.SetDelivered(audioS, s.clock())
	t.SetUnderrun(underrunS)
}

func (s *turnState) setPlayed(id int, playedS float64) { s.begun(id).SetPlayed(playedS) }

func (s *turnState) setDetached(id int, ms float64) { s.begun(id).SetDetached(ms) }

func (s *turnState) addToolCalls(id int, calls []metrics.ToolCallStats) {
	s.begun(id).AddToolCalls(calls...)
}

// unclosed returns the ids of turns recorded without their owner's close.
func (s *turnState) unclosed() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.unowned)
}

// openCount is the number of turns not recorded yet (tests).
func (s *turnState) openCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// openTurn returns turn id's metrics while it is open, begun or not (tests).
func (s *turnState) openTurn(id int) *metrics.TurnMetrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.open[id]; e != nil {
		return e.t
	}
	return nil
}
