package api

import (
	"errors"

	"github.com/omniserve/omniserve/internal/oaierror"
	"github.com/omniserve/omniserve/internal/stage"
)

// upstreamError answers err as the remote stage's upstream answered it (status, type, code,
// param, message, Retry-After), or reports false when err did not come from a remote stage.
// An unreachable or garbled upstream is a 502 upstream_error, a timeout a 504.
func upstreamError(err error) (*oaierror.Error, bool) {
	var ue *stage.UpstreamError
	if !errors.As(err, &ue) {
		return nil, false
	}
	return &oaierror.Error{Status: ue.ClientStatus(), Type: ue.ClientType(), Code: ue.ClientCode(),
		Param: ue.ClientParam(), Message: ue.ClientMessage(), RetryAfter: ue.RetryAfter}, true
}
