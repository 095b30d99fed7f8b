package session

import (
	"testing"
	"time"

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
		{ReasonExpired, metrics.CancelSessionClose, false, true},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			require.Equal(t, tc.source, cancelSourceFor(tc.reason))
			require.Equal(t, tc.unannounced, unannounced(tc.reason))
			require.Equal(t, tc.drains, drainsJobsAtClose(tc.reason))
		})
	}
}

// TestExpiryTimer: only a session that ends at its expiry gets a timer, which stops it with
// ReasonExpired for what is left of its length (none left: at once).
func TestExpiryTimer(t *testing.T) {
	now := time.Now()
	stopped := make(chan string, 1)
	stop := func(reason string) { stopped <- reason }
	require.Nil(t, expiryTimer(Options{}, now.Add(time.Hour), now, stop))
	tm := expiryTimer(Options{EndsAtExpiry: true}, now.Add(-time.Second), now, stop)
	require.NotNil(t, tm)
	select {
	case r := <-stopped:
		require.Equal(t, ReasonExpired, r)
	case <-time.After(time.Second):
		t.Fatal("an expiry already past fires at once")
	}
	tm = expiryTimer(Options{EndsAtExpiry: true}, now.Add(time.Hour), now, stop)
	select {
	case <-stopped:
		t.Fatal("an hour's expiry fired at once")
	case <-time.After(20 * time.Millisecond):
	}
	require.True(t, tm.Stop(), "stopped by the actor before it fires")
}
