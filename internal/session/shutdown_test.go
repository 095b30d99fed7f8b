package session

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/metrics"
)

// TestCloseReasonDecisions pins, per close reason, the three decisions of shutdown: the logged
// cancel reason of the active response, whether the close is announced (session.closed, the
// response's cancel), and whether queued jobs reach the engine first.
func TestCloseReasonDecisions(t *testing.T) {
	for _, tc := range []struct {
		reason      string
		source      string
		unannounced bool
		drains      bool
	}{
		{ReasonClientClose, metrics.CancelSessionClose, false, true},
		{ReasonDisconnect, ReasonDisconnect, true, false},
		{ReasonTimeout, ReasonTimeout, false, true},
		{ReasonShutdown, metrics.ReasonAbort, false, false},
		{ReasonInternalError, metrics.ReasonAbort, false, false},
		{ReasonSlowClient, metrics.CancelDisconnect, true, true},
		{ReasonResumeExpired, metrics.CancelDisconnectGraceExpired, true, true},
		{ReasonEvicted, metrics.CancelSessionClose, true, true},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			require.Equal(t, tc.source, cancelSourceFor(tc.reason))
			require.Equal(t, tc.unannounced, unannounced(tc.reason))
			require.Equal(t, tc.drains, drainsJobsAtClose(tc.reason))
		})
	}
}
