package session

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// engineErrorCounter is implemented by the manager's metrics when they count engine failures by
// cause (metrics.Collectors: omniserve_engine_errors_total).
type engineErrorCounter interface {
	CountEngineError(cause string)
}

var _ engineErrorCounter = (*metrics.Collectors)(nil)

// engineObserver logs and counts the session's engine failures: a shell part, since logging
// and metrics are I/O the decisions leave to the actor.
type engineObserver struct {
	log     *zap.Logger
	counter engineErrorCounter // nil when the metrics do not count engine failures
}

// engineFailed logs and counts an engine failure of the session (at epoch) under its cause
// (requestclient.ErrorCause) and returns the cause. told says whether the client gets an error
// event for it; a failure no response was there to carry is still logged and counted, never
// dropped unseen.
func (o engineObserver) engineFailed(code string, err error, told bool, epoch int) string {
	cause := requestclient.ErrorCause(err)
	o.log.Warn("engine failure", zap.String("code", code), zap.String("cause", cause), zap.Bool("told_client", told),
		zap.Int("epoch", epoch), zap.Error(err))
	if o.counter != nil {
		o.counter.CountEngineError(cause)
	}
	return cause
}

// engineErrorMessage is the client's message of an engine failure: the error, then the cause it
// is counted under, so that an error event explains itself.
func engineErrorMessage(err error, cause string) string {
	return fmt.Sprintf("%s (cause: %s)", errString(err), cause)
}
