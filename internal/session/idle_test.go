package session

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// idleWait: the idle timeout counts from the end of the audio still ahead of the client.
func TestIdleWait(t *testing.T) {
	t0 := time.Unix(100, 0)
	tests := []struct {
		name string
		r    *response
		now  time.Time
		want time.Duration
	}{
		{"nothing played", &response{}, t0, 5 * time.Second},
		{"played in real time", &response{started: t0, sentMs: 2000}, t0.Add(2 * time.Second), 5 * time.Second},
		{"1.5 s still ahead", &response{started: t0, sentMs: 3500}, t0.Add(2 * time.Second), 6500 * time.Millisecond},
		{"behind real time", &response{started: t0, sentMs: 1000}, t0.Add(2 * time.Second), 5 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, idleWait(5000, tc.r, tc.now))
		})
	}
	f := newIdleFollowUp()
	f.arm(time.Millisecond, 1234)
	require.Equal(t, 1234.0, f.fromMs)
	<-f.timer.C
	f.arm(time.Hour, 0)
	f.stop()
	select {
	case <-f.timer.C:
		t.Fatal("a stopped follow-up does not fire")
	default:
	}
}
