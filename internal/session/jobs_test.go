package session

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
)

// jobQueue: jobs run in submission order, each result carries its response id, a full queue
// refuses (backpressure), and jobsOut counts what the actor has not taken back.
func TestJobQueue(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		submit   int
		accepted int
	}{
		{"within capacity", 4, 3, 3},
		{"full queue refuses", 2, 4, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newJobQueue(tc.capacity)
			accepted := 0
			for i := range tc.submit {
				if !q.canSubmitJob() {
					require.False(t, q.queue(job{}), "canSubmitJob said no")
					continue
				}
				n := i
				require.True(t, q.queue(job{responseID: string(rune('a' + n)), run: func(context.Context) jobResult {
					return jobResult{turn: n}
				}}))
				accepted++
			}
			require.Equal(t, tc.accepted, accepted)
			require.Equal(t, tc.accepted, q.jobsOut)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() { defer close(done); q.runJobs(ctx) }()
			for i := range tc.accepted {
				r := <-q.results
				require.Equal(t, i, r.turn, "submission order")
				require.Equal(t, string(rune('a'+i)), r.responseID)
				q.taken()
			}
			require.Zero(t, q.jobsOut)
			cancel()
			<-done
		})
	}
}

// outputQueue: deliver never blocks, wakes the actor once per batch, and takeOutputs empties it
// in order.
func TestOutputQueue(t *testing.T) {
	tests := []struct {
		name string
		n    int
	}{
		{"none", 0},
		{"one", 1},
		{"a batch wakes once", 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newOutputQueue()
			for i := range tc.n {
				q.deliver(duplex.Output{Turn: i, Err: errors.New("x")})
			}
			require.Equal(t, min(tc.n, 1), len(q.outNotify))
			out := q.takeOutputs()
			require.Len(t, out, tc.n)
			for i, o := range out {
				require.Equal(t, i, o.Turn)
			}
			require.Empty(t, q.takeOutputs())
		})
	}
}

// settler records the turns settleJob settles.
type settler struct {
	settled []int
	err     error
}

func (f *settler) settleInput(_ context.Context, turn int) error {
	f.settled = append(f.settled, turn)
	return f.err
}

// settleJob settles the cancelled turn's input and tells the client nothing, also when
// settling fails.
func TestSettleJob(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"settled", nil},
		{"settling failed", errors.New("stream closed")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &settler{err: tc.err}
			r := settleJob(func(ctx context.Context) error { return f.settleInput(ctx, 7) }, zap.NewNop()).run(t.Context())
			require.Equal(t, []int{7}, f.settled)
			require.Equal(t, jobResult{}, r)
		})
	}
}
