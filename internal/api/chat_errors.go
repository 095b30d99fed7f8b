package api

import (
	"errors"
	"fmt"
	"net/http"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/oaierror"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// errNoResult is a completion whose events ended without a result or an error.
var errNoResult = errors.New("the completion ended without a result")

// engineError answers a completion that failed in the engine or a remote stage: the remote
// stage's own answer, else a 500 engine_error whose message names its cause. Either way the
// failure is logged and counted under its cause (requestclient.ErrorCause), never only
// answered. id is the completion's, when it has one.
func (h *chatHandler) engineError(id, what string, err error) *oaierror.Error {
	cause := requestclient.ErrorCause(err)
	h.log.Error("chat completion failed", zap.String("id", id), zap.String("cause", cause), zap.Error(err))
	if h.cfg.CountEngineError != nil {
		h.cfg.CountEngineError(cause)
	}
	if e, ok := upstreamError(err); ok {
		return e
	}
	return &oaierror.Error{Status: http.StatusInternalServerError, Type: "server_error", Code: "engine_error",
		Message: fmt.Sprintf("%s: %v (cause: %s)", what, err, cause)}
}

// upstreamError answers err as the remote stage's upstream answered it (status, type, code,
// param, message, Retry-After), or reports false when err did not come from a remote stage.
// An unreachable or garbled upstream is a 502 upstream_error, a timeout a 504.
func upstreamError(err error) (*oaierror.Error, bool) {
	ue, ok := requestclient.UpstreamErrorOf(err)
	if !ok {
		return nil, false
	}
	return &oaierror.Error{Status: ue.Status, Type: ue.Type, Code: ue.Code,
		Param: ue.Param, Message: ue.Message, RetryAfter: ue.RetryAfter}, true
}
