package session

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// attachment: a lost connection detaches only when it is the current one, a resume rotates the
// token and reports how long the session was detached.
func TestAttachmentLose(t *testing.T) {
	t0 := time.Unix(100, 0)
	tests := []struct {
		name     string
		gen      int // attachment whose connection was lost
		detached bool
		want     bool
	}{
		{"current connection", 0, false, true},
		{"stale connection", 1, false, false},
		{"already detached", 0, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newAttachment(true)
			defer a.graceTimer.Stop()
			a.detached = tc.detached
			require.Equal(t, tc.want, a.lose(tc.gen, t0, time.Hour))
			require.Equal(t, tc.want || tc.detached, a.detached)
			if tc.want {
				require.Equal(t, t0, a.detachedAt)
				require.True(t, a.graceTimer.Stop(), "the grace runs")
			}
		})
	}
}

func TestAttachmentReattach(t *testing.T) {
	t0 := time.Unix(100, 0)
	tests := []struct {
		name     string
		detached bool
		gap      time.Duration
	}{
		{"taken over while attached", false, 0},
		{"resumed after 3 s", true, 3 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newAttachment(true)
			old := a.resumeToken
			require.NotEmpty(t, old)
			require.True(t, a.tokenMatches(old))
			require.False(t, a.tokenMatches(old+"x"))
			require.False(t, a.tokenMatches(""))
			if tc.detached {
				a.lose(0, t0, time.Hour)
			}
			gap, was := a.reattach(t0.Add(3 * time.Second))
			require.Equal(t, tc.detached, was)
			require.Equal(t, tc.gap, gap)
			require.Equal(t, 1, a.attachGen)
			require.False(t, a.detached)
			require.False(t, a.tokenMatches(old), "the old token is void")
			require.True(t, a.tokenMatches(a.resumeToken))
			require.False(t, a.graceTimer.Stop(), "the grace is stopped")
		})
	}
	require.Empty(t, newAttachment(false).resumeToken, "no token when resume is off")
}
