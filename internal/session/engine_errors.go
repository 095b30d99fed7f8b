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

// engineFailed logs and counts an engine failure of this session under its cause
// (requestclient.ErrorCause) and returns the cause. told says whether the client gets an error
// event for it; a failure no response was there to carry is still logged and counted, never
// dropped unseen.
func (s *Session) engineFailed(code string, err error, told bool) string {
	cause := requestclient.ErrorCause(err)
	s.log.Warn("engine failure", zap.String("code", code), zap.String("cause", cause), zap.Bool("told_client", told),
		zap.Int("epoch", s.epoch), zap.Error(err))
	if c, ok := s.m.cfg.Metrics.(engineErrorCounter); ok {
		c.CountEngineError(cause)
	}
	return cause
}

// engineErrorMessage is the client's message of an engine failure: the error, then the cause it
// is counted under, so that an error event explains itself.
func engineErrorMessage(err error, cause string) string {
	return fmt.Sprintf("%s (cause: %s)", errString(err), cause)
}
