package rtcclient

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Packets written at once play back to back from the first one's arrival, not all at their
// arrival: a burst at a talk-spurt's start does not make the reply sound earlier than it can.
func TestPlayoutPlacesBurstBackToBack(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var p playout
	for i, tc := range []struct{ at, want time.Duration }{
		{0, 0},             // the spurt's first frame: at once
		{ms(1), ms(20)},    // written with it: after it
		{ms(1), ms(40)},    // and after that
		{ms(30), ms(60)},   // paced, still behind the burst
		{ms(500), ms(500)}, // after a pause: at its arrival
	} {
		require.Equal(t, t0.Add(tc.want), p.place(t0.Add(tc.at), ms(20)), "packet %d", i)
	}
}
