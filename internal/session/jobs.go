package session

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
)

// The actor's two queues to and from the engine. Engine calls that may wait (commit, respond,
// history) run as jobs on one goroutine, in submission order, so that they reach the engine in
// wire order without blocking the actor; the engine's outputs come back through a queue the
// actor drains on every wake-up.

type job struct {
	responseID string
	run        func(ctx context.Context) jobResult
}

type jobResult struct {
	responseID string
	itemID     string
	transcript duplex.Transcription
	haveTurn   bool
	turn       int
	err        error
	errCode    string
	// consumed: a commit without audio of its own, accepted (commit_outcome.go): the reason of
	// the listen that ends its turn if no response does.
	consumed string
}

// maxQueuedJobs bounds a session's engine jobs in flight. A client restoring a conversation
// sends one item per event in a burst (GPT-Live's session.start carries up to 128 history
// items), and each item is a job: 16 refused the 17th with input_backpressure. Each job holds
// an item the admission rule already measured (admission.go), so the bound is on events, not
// on the engine's work.
const maxQueuedJobs = 256

// jobQueue is the session's engine jobs: the bounded queue, their results and how many are
// out. Only the actor queues and counts; runJobs is the one goroutine that runs them.
type jobQueue struct {
	jobs    chan job
	results chan jobResult
	jobsOut int // jobs queued whose result the actor has not taken
}

func newJobQueue(n int) jobQueue {
	return jobQueue{jobs: make(chan job, n), results: make(chan jobResult, n)}
}

// drain runs on the actor during shutdown: it applies (apply, the actor's handleResult) the
// results of every submitted job until none is outstanding, the engine's context ends, or d has
// passed (a stuck engine must not hold the close). Jobs of a cancelled response check their
// response and return at once.
func (q *jobQueue) drain(engineCtx context.Context, d time.Duration, apply func(jobResult), log *zap.Logger) {
	if q.jobsOut == 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for q.jobsOut > 0 {
		select {
		case r := <-q.results:
			apply(r)
		case <-engineCtx.Done():
			return
		case <-timer.C:
			log.Warn("closing with engine jobs still queued", zap.Int("jobs", q.jobsOut))
			return
		}
	}
}

// canSubmitJob reports whether the next queue will succeed: only the actor sends to jobs, so a
// free slot now is still free when it queues.
func (q *jobQueue) canSubmitJob() bool { return len(q.jobs) < cap(q.jobs) }

// queue adds a job unless the queue is full (input backpressure).
func (q *jobQueue) queue(j job) bool {
	select {
	case q.jobs <- j:
		q.jobsOut++
		return true
	default:
		return false
	}
}

// taken notes that the actor took one job's result.
func (q *jobQueue) taken() { q.jobsOut-- }

// runJobs executes the jobs one at a time in submission order until ctx ends.
func (q *jobQueue) runJobs(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-q.jobs:
			r := j.run(ctx)
			r.responseID = j.responseID
			select {
			case q.results <- r:
			case <-ctx.Done():
				return
			}
		}
	}
}

// outputQueue carries the engine's outputs to the actor: deliver (the engine's callback, any
// goroutine) queues and wakes without blocking; the actor takes the lot on every wake-up. It is
// bounded by the response length (max output tokens), since the actor drains it each time.
type outputQueue struct {
	outMu     sync.Mutex
	outQ      []duplex.Output
	outNotify chan struct{}
}

func newOutputQueue() outputQueue { return outputQueue{outNotify: make(chan struct{}, 1)} }

// deliver is the engine's output callback.
func (q *outputQueue) deliver(o duplex.Output) {
	q.outMu.Lock()
	q.outQ = append(q.outQ, o)
	q.outMu.Unlock()
	select {
	case q.outNotify <- struct{}{}:
	default:
	}
}

// takeOutputs empties the queue.
func (q *outputQueue) takeOutputs() []duplex.Output {
	q.outMu.Lock()
	defer q.outMu.Unlock()
	out := q.outQ
	q.outQ = nil
	return out
}
