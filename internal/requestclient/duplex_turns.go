package requestclient

import (
	"sync"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/stage"
)

// turnState is the per-session turn bookkeeping of a Duplex (spec §4.7, corrected per §10). It
// exists only with LogStats on.
type turnState struct {
	mu        sync.Mutex
	numStages int
	clock     metrics.Clock
	session   *metrics.Aggregator // session-scoped: connector TX baseline for turns
	pending   *metrics.PendingTurn
	turn      *metrics.TurnMetrics // open turn, nil between turns
}

func newTurnState(numStages int, clock metrics.Clock) *turnState {
	n := max(numStages, 1)
	return &turnState{
		numStages: n,
		clock:     clock,
		session:   metrics.NewAggregator(n, false, clock(), n-1, metrics.WithClock(clock)),
		pending:   metrics.NewPendingTurn(clock),
	}
}

func (s *turnState) ingest(stageID int, m metrics.StageRequestStats, finalOutputType string, submitTS float64, rid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.session.OnStageMetrics(stageID, rid, m, finalOutputType)
	s.session.MarkStageTimes(stageID, submitTS)
	if s.turn != nil {
		s.turn.Accumulate(stageID, m, finalOutputType, submitTS)
		return
	}
	s.pending.Add(stageID, m, finalOutputType, submitTS)
}

func (s *turnState) firstOutput(stageID int, audio bool) {
	s.mu.Lock()
	t := s.turn
	s.mu.Unlock()
	if t != nil {
		t.MarkFirstOutput(stageID, s.clock(), audio)
	}
}

func (s *turnState) transfer(t stage.TransferEvent, rid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.session.OnForward(t.From, t.To, rid, t.SizeBytes, t.TxMs, t.UsedShm)
}

func (s *turnState) begin(rid, responseID string, turnID int, arrival float64, log *zap.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.turn != nil {
		if s.turn.ResponseID() == responseID {
			return
		}
		s.turn.CopySessionTX(s.session)
		s.turn.Finalize(metrics.ReasonAbort, log, true)
		s.turn = nil
	}
	s.turn = s.pending.BeginTurn(rid, responseID, turnID, arrival, s.numStages, s.session)
}

// finalize logs the open turn with reason and drops it; the pending stamp of the next turn, if
// one was set after this turn opened, survives (§10 #1).
func (s *turnState) finalize(reason string, log *zap.Logger, col *metrics.Collectors) bool {
	s.mu.Lock()
	t := s.turn
	s.turn = nil
	s.mu.Unlock()
	if t == nil {
		return false
	}
	t.CopySessionTX(s.session)
	ok := t.Finalize(reason, log, true)
	if ok && col != nil {
		if rec, have := t.Record(); have {
			col.ObserveFinalized(rec)
		}
	}
	return ok
}

func (s *turnState) reset() {
	s.pending.Reset()
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
