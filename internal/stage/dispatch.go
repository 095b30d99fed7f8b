package stage

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/omniserve/omniserve/internal/metrics"
)

// dispatcher delivers one request's (or duplex stream's) events to its Sink from a single
// goroutine, in the order the stages produced them. The queue is bounded: a Sink that falls
// behind makes this request's stages wait in push, never another request's.
type dispatcher struct {
	sink    Sink
	ch      chan event
	done    chan struct{}
	stopped atomic.Bool // set by stop: nothing more is delivered
	// remote names each stage's remote backends; it is stamped on the stage's statistics
	// (StageRequestStats.Remote) so that the tables say which stages ran elsewhere.
	remote [2]string

	closeOnce sync.Once
}

// event is one Sink call. turn, when set, is checked at delivery: events of an aborted turn
// are dropped, so nothing of that turn reaches the Sink once the abort is made. A kept event
// (a turn's stage metrics) is delivered even after an abort or stop: nothing accepted is
// lost, and a cut-short turn is still reported with the work its stages did.
type event struct {
	turn *turnState
	kept bool
	out  *OutputMessage
	sm   *StageMetricsMessage
	tx   *TransferEvent
	end  *TurnEnd
}

func newDispatcher(sink Sink, capacity int) *dispatcher {
	return &dispatcher{sink: sink, ch: make(chan event, capacity), done: make(chan struct{})}
}

// run delivers events until close; its owner starts it once and waits on done.
func (d *dispatcher) run() {
	defer close(d.done)
	for ev := range d.ch {
		if d.dropped(ev) {
			continue
		}
		switch {
		case ev.out != nil:
			d.sink.OnOutput(*ev.out)
		case ev.sm != nil:
			d.sink.OnStageMetrics(*ev.sm)
		case ev.tx != nil:
			d.sink.OnTransfer(*ev.tx)
		case ev.end != nil:
			if te, ok := d.sink.(TurnEndSink); ok {
				te.OnTurnEnd(*ev.end)
			}
		}
	}
}

// dropped reports an event that an abort or stop silenced.
func (d *dispatcher) dropped(ev event) bool {
	return !ev.kept && (d.stopped.Load() || (ev.turn != nil && ev.turn.aborted.Load()))
}

// push queues an event, waiting while the queue is full until ctx ends.
func (d *dispatcher) push(ctx context.Context, ev event) error {
	if d.dropped(ev) {
		return fmt.Errorf("delivering output: %w", context.Canceled)
	}
	if d.held(ev) {
		return nil
	}
	select {
	case d.ch <- ev:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("delivering output: %w", ctx.Err())
	}
}

func (d *dispatcher) output(ctx context.Context, ts *turnState, m OutputMessage) error {
	return d.push(ctx, event{turn: ts, out: &m})
}

func (d *dispatcher) stageMetrics(ctx context.Context, ts *turnState, m StageMetricsMessage) error {
	d.stampRemote(&m)
	return d.push(ctx, event{turn: ts, sm: &m})
}

func (d *dispatcher) stampRemote(m *StageMetricsMessage) {
	if m.StageID >= 0 && m.StageID < len(d.remote) && m.Metrics.Remote == "" {
		m.Metrics.Remote = d.remote[m.StageID]
	}
}

// turnMetrics queues a stage's one metrics snapshot of a response. It is delivered even when
// the turn is aborted or the Sink stopped meanwhile, so it waits for queue room regardless of
// the turn's ctx: the dispatcher keeps draining (it drops the aborted turn's other events),
// so the wait is bounded by the Sink, and the dispatcher outlives every producer (it is closed
// only after them), so the send cannot hit a closed queue.
func (d *dispatcher) turnMetrics(ts *turnState, m StageMetricsMessage) {
	d.stampRemote(&m)
	ev := event{turn: ts, kept: true, sm: &m}
	if !d.held(ev) {
		d.ch <- ev
	}
}

// turnEnd queues the report that the turn's stages are finished; like turnMetrics it is kept
// (delivered after an abort or stop), after every snapshot the turn's stages queued.
func (d *dispatcher) turnEnd(ts *turnState, rid string) {
	ev := event{turn: ts, kept: true, end: &TurnEnd{RequestID: rid, Turn: ts.n, Aborted: ts.aborted.Load()}}
	if !d.held(ev) {
		d.ch <- ev
	}
}

// inputSettled queues the answer to DuplexStream.SettleInput, after every event queued before
// it; kept like turnEnd.
func (d *dispatcher) inputSettled(rid string, turn int) {
	d.ch <- event{kept: true, end: &TurnEnd{RequestID: rid, Turn: turn, InputSettled: true}}
}

func (d *dispatcher) transfer(ctx context.Context, ts *turnState, t TransferEvent) error {
	return d.push(ctx, event{turn: ts, tx: &t})
}

// stop makes every later delivery a no-op (a call already in progress finishes).
func (d *dispatcher) stop() { d.stopped.Store(true) }

// close ends the queue once every producer has returned; queued events are still delivered
// unless stopped. It does not wait; wait on done.
func (d *dispatcher) close() { d.closeOnce.Do(func() { close(d.ch) }) }

// turnState is one response (duplex) or the one generation of a chat request. Cancelling it
// stops both stages' work for it; aborted makes the dispatcher drop its remaining events.
type turnState struct {
	n       int
	ctx     context.Context //nolint:containedctx // the turn's lifetime, shared by its stages
	cancel  context.CancelFunc
	aborted atomic.Bool
	keep    atomic.Bool   // keep the partial reply in the conversation (CancelResponse(true))
	done    chan struct{} // closed when both stages are finished with the turn
	// queuedTS is when the response was submitted (wall seconds): TTFT counts from here, so it
	// includes waiting for a thinker worker and the prompt's prefill, as vLLM's does.
	queuedTS float64
	// hold, for a speculative turn (preempt.go), keeps its events back until the endpoint
	// confirms it, or drops them; nil for every other turn.
	hold *specHold
}

func newTurn(parent context.Context, n int) *turnState {
	ctx, cancel := context.WithCancel(parent)
	return &turnState{n: n, ctx: ctx, cancel: cancel, done: make(chan struct{}), queuedTS: metrics.Now()}
}

// abort drops the turn's undelivered events and cancels its work.
func (t *turnState) abort(keepHistory bool) {
	t.keep.Store(keepHistory)
	t.aborted.Store(true)
	t.cancel()
}
