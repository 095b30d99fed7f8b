package requestclient

import (
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/metrics"
)

// publishTurn closes a chat request's turn with its reason and publishes its record; the tables
// (when the turn has them) are logged by Finalize.
func publishTurn(t *metrics.TurnMetrics, reason string, log *zap.Logger, col *metrics.Collectors,
	onFinal func(metrics.FinalizedRequest) string) {
	if t.Finalize(reason, log, t.HasTables()) {
		observeTurn(t, "", col, onFinal)
	}
}

// observeTurn hands a finalized turn's one record to tracing (which names the trace) and to
// Prometheus: the same path for a duplex turn (of a session speaking dialect) and a chat
// request (dialect "").
func observeTurn(t *metrics.TurnMetrics, dialect string, col *metrics.Collectors, onFinal func(metrics.FinalizedRequest) string) {
	if col == nil {
		return
	}
	rec, have := t.Record()
	if !have {
		return
	}
	rec.Dialect = dialect
	if onFinal != nil {
		rec.TraceID = onFinal(rec)
	}
	col.ObserveFinalized(rec)
}
