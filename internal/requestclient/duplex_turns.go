package requestclient

import (
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/stage"
)

// A turn's life, read top to bottom in this file (vllm-omni's per-turn metrics, with the
// differences docs/STATS.md lists):
//
//   - Born: the first input of the turn (MarkTurnArrival) opens it with its t0, under the one id
//     the session numbers turns with. The session passes that id down with every input and with
//     Respond; the stages tag every row, output, transfer and TurnEnd with it.
//   - Begun: BeginTurn attaches its response and returns the turn's handle (Turn), which every
//     later call of the response takes. Only a begun turn has an owner who closes it; the input
//     of a turn never begun is dropped, never recorded.
//   - Served: its rows, outputs and transfers are routed to it by id alone; its response has
//     started once a Respond for it returned, the stream's speak decision announced it, or it
//     spoke.
//   - Closed: its owner, the session, closes it exactly once with its outcome (EndTurn: the
//     reason, the delivery figures, and whether its response never started); the stream's close,
//     or a newer turn begun first, closes a turn its owner did not (the latter is a bug,
//     reported by Unclosed).
//   - Recorded: once closed and its stages reported, the turn leaves the open turns and its
//     TurnMetrics makes the one immutable record (tables, structured record, Prometheus). A
//     natural end (stop, length) is recorded at its close: its stages reported before its last
//     output. An interrupted turn waits for TurnEnd(id) when its response started or may still
//     start; one cancelled before its response started waits for InputSettled(id). When the
//     stream is closed, nothing more will arrive: a closed turn is recorded at once.
//
// No timer decides anything. The state is O(open turns × stages) however long the session: no
// session-scoped aggregator, no per-chunk rows. It exists only with LogStats on or Prometheus
// collectors set, so the off path costs nothing.

// turn is one turn between its first input and its record. Its fields are guarded by the
// turnState's mutex; its methods are the decisions of its life.
type turn struct {
	id int
	t  *metrics.TurnMetrics // born at the first input; its response attached at begin

	begun   bool   // its response is attached: it has an owner who closes it
	reason  string // the close reason ("" while open)
	closing bool   // closed; the record waits for the stages' report
	// unstarted: closed by closeUnstarted, its record waits for the input settled.
	unstarted bool
	// started: a stage response runs under this id (Respond returned it, or the stream's own
	// speak decision announced it); responding counts Respond calls in flight for it.
	started    bool
	responding int
	stagesDone float64 // when TurnEnd(id) arrived; 0 = not yet
}

// begin attaches the turn's response; it reports whether it did (a turn begins once).
func (e *turn) begin(responseID string, turnID int) bool {
	if e == nil || e.begun || !e.t.Begin(responseID, turnID) {
		return false
	}
	e.begun = true
	return true
}

// stagesReported is TurnEnd(id) at now: every stage that worked for the turn delivered its
// (partial) rows. The turn is recorded now when its owner closed it while its response ran.
func (e *turn) stagesReported(now float64) (recordNow bool) {
	e.stagesDone = now
	e.t.MarkStagesDone(now)
	return e.closing && !e.unstarted
}

// respondEnded is the end of one Respond call for the turn (after any turn it started was
// marked started). A closed turn whose response did not start and cannot start any more is
// recorded now: there is no stage work to wait for.
func (e *turn) respondEnded() (recordNow bool) {
	if e == nil {
		return false
	}
	e.responding--
	return e.closing && !e.unstarted && !e.started && e.responding == 0
}

// close is the owner's close with reason. closed is false when the owner cannot close it (nil,
// not begun, or already closed). A natural end (stop, length) is recorded now: its stages
// reported before its last output. An interrupted turn is recorded now when its stages already
// reported, when no response runs or can still start for it, or when the stream is closed;
// otherwise when its stages report (stagesReported).
func (e *turn) close(reason string, streamClosed bool) (closed, recordNow bool) {
	if e == nil || !e.begun || e.closing {
		return false, false
	}
	e.closing, e.reason = true, reason
	switch metrics.NormalizeFinishedReason(reason) {
	case metrics.ReasonStop, metrics.ReasonLength:
		return true, true
	}
	e.t.MarkStagesDone(0) // generation ends at the interruption (keep-first: earlier if done)
	return true, streamClosed || e.stagesDone != 0 || (!e.started && e.responding == 0)
}

// closeUnstarted is the owner's close with reason of a turn whose response was cancelled
// before it started (and never will): the input it answered may still be on its way, so it is
// recorded when the stages report that input settled (waitsForInput), or now when the stream
// is closed.
func (e *turn) closeUnstarted(reason string, streamClosed bool) (closed, recordNow bool) {
	if e == nil || !e.begun || e.closing {
		return false, false
	}
	e.closing, e.reason, e.unstarted = true, reason, true
	e.t.MarkStagesDone(0)
	return true, streamClosed
}

// waitsForInput reports a turn closed unstarted: its record waits for its input settled.
func (e *turn) waitsForInput() bool { return e != nil && e.closing && e.unstarted }

// closeUnowned closes a begun turn its owner did not close, with reason: the stream's close,
// or a newer turn's begin. It reports whether it did.
func (e *turn) closeUnowned(reason string) bool {
	if e.closing {
		return false
	}
	e.closing, e.reason = true, reason
	return true
}

// turnState is the registry of a DuplexRequest's open turns by id, and the one path that
// records them (record).
type turnState struct {
	mu         sync.Mutex
	numStages  int
	clock      metrics.Clock
	log        *zap.Logger
	col        *metrics.Collectors
	onFinal    func(metrics.FinalizedRequest) string // Options.OnFinalized
	logStats   bool
	structured bool
	dialect    string // the session's wire dialect: the records' Dialect

	open   map[int]*turn // turns not recorded yet, by id
	floor  int           // highest id recorded or abandoned: its rows are dropped
	closed bool          // the stream closed: a turn closed from now on is recorded at once
	// unowned lists turns that were recorded without their owner closing them (a newer turn
	// began first): a bug in the caller, reported by Unclosed.
	unowned []int
}

func newTurnState(numStages int, clock metrics.Clock, log *zap.Logger, col *metrics.Collectors, logStats bool) *turnState {
	return &turnState{
		numStages: max(numStages, 1),
		clock:     clock,
		log:       log,
		col:       col,
		logStats:  logStats,
		open:      map[int]*turn{},
	}
}

// Born.

// entryLocked returns turn id, born now with t0 arrival (<= 0: now) unless it exists or the
// id is over (recorded or abandoned: nil).
func (s *turnState) entryLocked(id int, rid string, arrival float64) *turn {
	if e := s.open[id]; e != nil {
		return e
	}
	if id <= s.floor {
		return nil
	}
	e := &turn{id: id, t: metrics.NewInputTurn(rid, arrival, s.numStages, s.clock)}
	e.t.SetStructuredRecords(s.structured)
	s.open[id] = e
	return e
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
	if e := s.open[id]; e != nil && e.begun {
		return
	}
	delete(s.open, id)
	s.floor = max(s.floor, id)
}

// Begun.

// begin attaches responseID to turn id (born now, at arrival, when no input came first); a
// second call does nothing. A begun older turn its owner never closed is recorded with reason
// abort and reported by Unclosed; older turns whose response never began are dropped (their
// input was answered by none).
func (s *turnState) begin(id int, rid, responseID string, turnID int, arrival float64) {
	s.mu.Lock()
	// A response with no new input before it: the turn is born at its begin.
	if !s.entryLocked(id, rid, arrival).begin(responseID, turnID) {
		s.mu.Unlock()
		return
	}
	var stale []*turn
	for oid, o := range s.open {
		switch {
		case oid >= id || o.closing:
		case !o.begun:
			delete(s.open, oid)
		case o.closeUnowned(metrics.ReasonAbort):
			s.unowned = append(s.unowned, oid)
			stale = append(stale, o)
			s.log.Warn("a turn was never closed by its owner; recording it as aborted",
				zap.Int("turn", oid), zap.String("response_id", o.t.ResponseID()))
		}
	}
	s.record(stale...)
}

// current is the newest begun turn its owner has not closed (0: none).
func (s *turnState) current() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, e := range s.open {
		if !e.closing && e.begun {
			n = max(n, id)
		}
	}
	return n
}

// Served.

// respondStart and respondEnd bracket a Respond call for turn id; n is the id the stream ran
// the response under (0 on failure).
func (s *turnState) respondStart(id int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.open[id]; e != nil {
		e.responding++
	}
}

func (s *turnState) respondEnd(id, n int) {
	s.mu.Lock()
	if en := s.open[n]; en != nil {
		en.started = true
	}
	e := s.open[id]
	if !e.respondEnded() {
		s.mu.Unlock()
		return
	}
	s.record(e)
}

// routeLocked is the turn a row of turn k goes to: k's own, or nil (its turn is over, or no
// input of it was stamped: work before the user began, which belongs to no turn). k <= 0 means
// the sender did not say (tests, chat-shaped callers): the newest turn.
func (s *turnState) routeLocked(k int) *turn {
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
	if m.Kind == duplex.OutDecision {
		if m.Decision == duplex.DecisionSpeak {
			// The stream answered the input by itself: its response runs under this id, and
			// the engine's own endpoint ends the input when no speech_stopped / commit did.
			e.started = true
			e.t.MarkInputEndIfUnset(m.StageSubmitTS)
		}
		return
	}
	if m.Kind == duplex.OutAudio || m.Kind == duplex.OutText {
		e.started = true // only a response speaks
		e.t.MarkFirstOutput(m.StageID, s.clock(), m.Kind == duplex.OutAudio)
	}
}

func (s *turnState) transfer(ev stage.TransferEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.routeLocked(ev.Turn); e != nil {
		e.t.AddTransfer(ev.From, ev.To, ev.SizeBytes, ev.TxMs, ev.BlockedMs, ev.UsedShm)
	}
}

// begunTurn returns turn id's metrics once its response began (nil before, and once recorded).
func (s *turnState) begunTurn(id int) *metrics.TurnMetrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.open[id]; e != nil && e.begun {
		return e.t
	}
	return nil
}

func (s *turnState) setDelivered(id int, audioS, underrunS float64) {
	t := s.begunTurn(id)
	t.SetDelivered(audioS, s.clock())
	t.SetUnderrun(underrunS)
}

func (s *turnState) setPlayed(id int, playedS float64) { s.begunTurn(id).SetPlayed(playedS) }

func (s *turnState) setDetached(id int, ms float64) { s.begunTurn(id).SetDetached(ms) }

func (s *turnState) addToolCalls(id int, calls []metrics.ToolCallStats) {
	s.begunTurn(id).AddToolCalls(calls...)
}

// turnEnd is the stages' report that turn n's response is finished: every stage that worked
// for it delivered its (partial) snapshot before this.
func (s *turnState) turnEnd(n int) {
	s.mu.Lock()
	e := s.open[n]
	if e == nil || !e.stagesReported(s.clock()) {
		s.mu.Unlock()
		return
	}
	s.record(e)
}

// inputSettled is the stages' report that every row of the input of turn k given before
// SettleInput was delivered: a turn closed before its response started is recorded now.
func (s *turnState) inputSettled(k int) {
	s.mu.Lock()
	var done []*turn
	for id, e := range s.open {
		if id <= k && e.waitsForInput() {
			done = append(done, e)
		}
	}
	s.record(done...)
}

// Closed.

// finalize is the owner's close of turn id with reason (turn.close, or turn.closeUnstarted
// for a turn whose response was cancelled before it started); it returns false when the turn
// was not open, not begun, or already closed.
func (s *turnState) finalize(id int, reason string, unstarted bool) bool {
	s.mu.Lock()
	e := s.open[id]
	closeTurn := e.close
	if unstarted {
		closeTurn = e.closeUnstarted
	}
	closed, now := closeTurn(reason, s.closed)
	if !now {
		s.mu.Unlock()
		return closed
	}
	s.record(e)
	return true
}

// settleFailed records turn id now: the stages cannot report its input settled.
func (s *turnState) settleFailed(id int) {
	s.mu.Lock()
	e := s.open[id]
	if !e.waitsForInput() {
		s.mu.Unlock()
		return
	}
	s.record(e)
}

// flush records every turn still open with the reason it was closed with (reason for one never
// closed: the stream's close is its owner's) and drops the input of turns never begun. The
// stream is closed: nothing more will arrive.
func (s *turnState) flush(reason string) {
	s.mu.Lock()
	s.closed = true
	var done []*turn
	for id, e := range s.open {
		if !e.begun {
			delete(s.open, id) // input no response answered: no record
			continue
		}
		e.closeUnowned(reason)
		done = append(done, e)
	}
	s.record(done...)
}

// Recorded.

// record is the one way out of the open turns. The caller holds s.mu; record takes es out of
// the open turns (their late rows are dropped from now on), releases s.mu, and then, outside
// the lock because it calls out, has each one's TurnMetrics make its one record in id order:
// the tables, the structured record, Prometheus.
func (s *turnState) record(es ...*turn) {
	slices.SortFunc(es, func(a, b *turn) int { return a.id - b.id })
	for _, e := range es {
		delete(s.open, e.id)
		s.floor = max(s.floor, e.id)
	}
	s.mu.Unlock()
	for _, e := range es {
		if e.t.Finalize(e.reason, s.log, s.logStats) {
			observeTurn(e.t, s.dialect, s.col, s.onFinal)
		}
	}
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
