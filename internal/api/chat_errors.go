package api

import (
	"github.com/omniserve/omniserve/internal/oaierror"
	"github.com/omniserve/omniserve/internal/requestclient"
)

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
