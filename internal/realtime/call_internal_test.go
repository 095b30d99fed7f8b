package realtime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The hang-up linger follows the call's measured round trip, never below the LAN floor nor
// above the cap: a browser far away still gets the reset's acknowledgement before the abort.
func TestCloseLinger(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		srttS float64
		want  time.Duration
	}{
		{0, dcCloseLinger},              // not measured yet
		{0.0004, dcCloseLinger},         // loopback
		{0.180, 360 * time.Millisecond}, // a long-haul path
		{5, dcCloseLingerMax},           // a pathological estimate
	} {
		require.Equal(t, tt.want, closeLinger(tt.srttS), "srtt %v s", tt.srttS)
	}
}
