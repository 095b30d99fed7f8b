package requestclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/stage"
)

// Fence identifies the stage-0 resource of one session epoch.
type Fence struct {
	SessionID   string
	Incarnation int
	Epoch       int
}

// stage0ID is the 8-part resource request id (architecture.md "Identities").
func (f Fence) stage0ID() string {
	return metrics.DuplexResourceRequestID(f.SessionID, f.Incarnation, f.Epoch, "stage0")
}

// Duplex errors.
var (
	// ErrInputBackpressure: more than maxPendingInputBytes of appended audio is not yet processed.
	ErrInputBackpressure = errors.New("input backpressure: too much pending input")
	// errDuplexClosed: the stream was closed or aborted.
	errDuplexClosed = errors.New("duplex stream closed")
)

// maxPendingInputBytes bounds appended, unprocessed float32 audio per session (16 MiB, reference
// max_pending_input_bytes_per_session).
const maxPendingInputBytes = 16 << 20

// maxInputStall bounds how long queued input may wait behind an op that makes no progress (a
// stalled ASR or engine): past it new input fails fast with ErrInputBackpressure instead of
// piling up behind the stall.
const maxInputStall = 5 * time.Second

// opOverhead is what an op without audio (commit, text, discard, respond) counts against
// maxPendingInputBytes, so that the queue is bounded in count as well as in bytes.
const opOverhead = 256

// DuplexRequest is the request client of one duplex session: it owns the long-lived stage-0 stream,
// feeds it in wire order, and keeps the session's turn metrics.
type DuplexRequest struct {
	c      *Client
	stream duplexStream
	out    func(duplex.Output)
	log    *zap.Logger

	// The op queue: a FIFO bounded by bytes (pending, maxPendingInputBytes) and by time (an op
	// may not wait more than maxInputStall behind a stalled one), never by blocking the caller:
	// the session actor calls enqueue and must always get an answer at once.
	qmu      sync.Mutex
	queue    []*op
	progress time.Time     // when the runner last started an op, or the queue became non-empty
	wake     chan struct{} // buffered(1): the queue became non-empty
	now      func() time.Time

	gen     atomic.Int64 // current chain; a failure bumps failedGen to stop the rest of its chain
	failed  atomic.Int64
	pending atomic.Int64
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closed  atomic.Bool
	opened  time.Time // when OpenDuplex succeeded (zero for test-made streams)

	mu        sync.Mutex
	fence     Fence
	numStages int
	turns     *turnState // nil when neither LogStats nor Prometheus wants turns: nothing at all
}

// duplexStream is what Duplex needs of *stage.DuplexStream (declared here, by the consumer, so
// tests can drive the FIFO and turn metrics with a fake that checks its inputs).
type duplexStream interface {
	AppendAudio(ctx context.Context, turn int, pcm16k []float32) error
	StartCommit(ctx context.Context, turn int, respond bool) (wait func(context.Context) (duplex.Transcription, error), err error)
	SetTranscriptLogprobs(ctx context.Context, on bool) error
	DiscardAudio(ctx context.Context) error
	AppendText(ctx context.Context, turn int, role, text string) error
	Respond(ctx context.Context, turn, maxTokens int) (int, error)
	CancelResponse(keepHistory bool)
	CancelTurn(n int, keepHistory bool)
	SettleInput(ctx context.Context, turn int) error
	Close()
}

type op struct {
	gen   int64
	bytes int64
	run   func(ctx context.Context) error
	done  chan error // nil for fire-and-forget appends
	// always runs the op even when its chain failed: a discard must reach the ASR whatever
	// happened to the appends it discards.
	always bool
}

// OpenDuplex opens the session's stage-0 stream. out receives every output in order, from the
// pipeline's goroutine; it must not block.
func (c *Client) OpenDuplex(ctx context.Context, f Fence, opts duplex.Options, out func(duplex.Output)) (*DuplexRequest, error) {
	if c.pipeline == nil {
		return nil, fmt.Errorf("opening duplex stream: %w", errDuplexClosed)
	}
	d := c.newDuplex(f, opts.Dialect, c.pipeline.NumStages(), out)
	st, err := c.pipeline.OpenDuplex(ctx, streamOptions(opts, f.stage0ID(), c.pipeline.DuplexSampling()), d)
	if err != nil {
		c.unregister(f.stage0ID())
		if errors.Is(err, stage.ErrQueueFull) {
			c.opts.Collectors.AdmissionRejected()
		}
		return nil, fmt.Errorf("opening duplex stream: %w", err)
	}
	d.opened = time.Now()
	c.opts.Collectors.SessionOpened()
	d.start(st)
	return d, nil
}

func (c *Client) newDuplex(f Fence, dialect string, numStages int, out func(duplex.Output)) *DuplexRequest {
	dialect = metrics.NormalizeDialect(dialect)
	// The dialect rides on every log line of the stream, the --log-stats tables included, so an
	// operator can tell the sessions of each wire protocol apart.
	d := &DuplexRequest{c: c, out: out, fence: f, numStages: numStages, wake: make(chan struct{}, 1),
		now: time.Now, log: c.log.With(zap.String("session_id", f.SessionID), zap.String("dialect", dialect))}
	d.gen.Store(1) // failed starts at 0: no chain has failed yet
	if c.opts.LogStats || c.opts.Collectors != nil {
		d.turns = newTurnState(numStages, c.clock, d.log, c.opts.Collectors, c.opts.LogStats)
		d.turns.onFinal = c.opts.OnFinalized
		d.turns.structured = c.opts.StructuredStats
		d.turns.dialect = dialect
	}
	c.register(f.stage0ID(), "duplex")
	return d
}

func (d *DuplexRequest) start(st duplexStream) {
	d.stream = st
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	d.wg.Add(1)
	go func() { defer d.wg.Done(); d.runOps(ctx) }()
}

// runOps executes appends and barriers one at a time in submission (wire) order. A failed op
// stops the queued ops of its chain; the next command the session sends starts a new chain.
func (d *DuplexRequest) runOps(ctx context.Context) {
	for {
		o := d.next()
		if o == nil {
			select {
			case <-ctx.Done():
				return
			case <-d.wake:
				continue
			}
		}
		if ctx.Err() != nil {
			d.pending.Add(-o.bytes)
			if o.done != nil {
				o.done <- errDuplexClosed
			}
			continue
		}
		var err error
		if o.gen <= d.failed.Load() && !o.always {
			err = fmt.Errorf("skipped: an earlier append of this chain failed")
		} else if err = o.run(ctx); err != nil {
			d.failed.Store(o.gen)
			d.gen.CompareAndSwap(o.gen, o.gen+1)
			// An op that fails while the stream is being closed (its ctx ends, its outputs are
			// refused) is no failure to report: the session closed the stream, and one reopened
			// with new settings is given the buffered audio again.
			if o.done == nil && !d.closed.Load() {
				d.out(duplex.Output{Kind: duplex.OutError, Turn: -1, Err: fmt.Errorf("appending audio: %w", err)})
			}
		}
		d.pending.Add(-o.bytes)
		if o.done != nil {
			o.done <- err
		}
	}
}

// next pops the queue's head and stamps progress; nil when the queue is empty.
func (d *DuplexRequest) next() *op {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	if len(d.queue) == 0 {
		return nil
	}
	o := d.queue[0]
	d.queue[0] = nil
	d.queue = d.queue[1:]
	if len(d.queue) == 0 {
		d.queue = nil // let the backing array go once drained
	}
	d.progress = d.now()
	return o
}

// queued returns the number of ops waiting (not counting the one running).
func (d *DuplexRequest) queued() int {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	return len(d.queue)
}

// enqueue appends o to the FIFO without ever blocking: it fails with ErrInputBackpressure when
// the pending bytes would pass maxPendingInputBytes or when the queue has made no progress for
// maxInputStall (a discard, which only lightens the engine's work, is exempt from the stall
// bound), and with errDuplexClosed after Close. ctx is unused: nothing here waits.
func (d *DuplexRequest) enqueue(_ context.Context, o *op) error {
	if d.closed.Load() {
		return errDuplexClosed
	}
	cost := max(o.bytes, opOverhead)
	if d.pending.Add(cost) > maxPendingInputBytes {
		d.pending.Add(-cost)
		return fmt.Errorf("%w: more than %d bytes of input are pending", ErrInputBackpressure, maxPendingInputBytes)
	}
	o.bytes = cost
	d.qmu.Lock()
	now := d.now()
	if len(d.queue) == 0 {
		d.progress = now
	} else if stalled := now.Sub(d.progress); stalled > maxInputStall && !o.always {
		d.qmu.Unlock()
		d.pending.Add(-cost)
		return fmt.Errorf("%w: the engine has taken no input for %s", ErrInputBackpressure, stalled.Round(time.Millisecond))
	}
	o.gen = d.gen.Load()
	d.queue = append(d.queue, o)
	d.qmu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return nil
}

func (d *DuplexRequest) barrier(ctx context.Context, run func(ctx context.Context) error) error {
	o := &op{run: run, done: make(chan error, 1)}
	if err := d.enqueue(ctx, o); err != nil {
		return err
	}
	select {
	case err := <-o.done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Stage0ID returns the current epoch's resource id.
func (d *DuplexRequest) Stage0ID() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fence.stage0ID()
}

// AppendAudio queues 16 kHz audio of turn's input behind earlier appends and returns at once; a
// failure is reported through out as an Error output with Turn -1 and stops the queued
// appends.
func (d *DuplexRequest) AppendAudio(ctx context.Context, turn int, pcm16k []float32) error {
	n := int64(4 * len(pcm16k))
	return d.enqueue(ctx, &op{bytes: n, run: func(ctx context.Context) error { return d.stream.AppendAudio(ctx, turn, pcm16k) }})
}

// Commit ends the user's utterance after every earlier append and returns its transcript
// (with its words' logprobs when the stream asks for them). Only the cut of the utterance runs
// in the append FIFO; its transcription is waited for outside it, so that appends sent after
// the commit go on while a remote ASR works.
func (d *DuplexRequest) Commit(ctx context.Context, turn int, respond bool) (duplex.Transcription, error) {
	var wait func(context.Context) (duplex.Transcription, error)
	err := d.barrier(ctx, func(ctx context.Context) error {
		var err error
		wait, err = d.stream.StartCommit(ctx, turn, respond)
		return err
	})
	if err != nil {
		return duplex.Transcription{}, fmt.Errorf("committing input: %w", err)
	}
	tr, err := wait(ctx)
	if err != nil {
		return tr, fmt.Errorf("committing input: %w", err)
	}
	return tr, nil
}

// SetTranscriptLogprobs turns the words' logprobs of the transcripts on or off from the next
// utterance the stream ends: it runs behind earlier appends and commits, and before later
// ones, so a commit carries them exactly when the setting before it in wire order asked.
// A remote ASR refuses to turn them on (stage.ErrInvalidRequest).
func (d *DuplexRequest) SetTranscriptLogprobs(ctx context.Context, on bool) error {
	// always: the setting is the session's, whatever happened to the appends before it.
	o := &op{always: true, run: func(ctx context.Context) error { return d.stream.SetTranscriptLogprobs(ctx, on) }, done: make(chan error, 1)}
	err := d.enqueue(ctx, o)
	if err == nil {
		select {
		case err = <-o.done:
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
	}
	if err != nil {
		return fmt.Errorf("setting transcript logprobs: %w", err)
	}
	return nil
}

// DiscardAudio queues, behind earlier appends, the stream's forgetting of every uncommitted
// append (input_audio_buffer.clear) and returns at once; a failure is reported like an
// append's. It runs even when an earlier append of its chain failed.
func (d *DuplexRequest) DiscardAudio(ctx context.Context) error {
	return d.enqueue(ctx, &op{always: true, run: d.stream.DiscardAudio})
}

// ClearTurnInput is input_audio_buffer.clear for the statistics: turn's input is abandoned
// (its t0 stamp, input end and rows are dropped, and its rows still on their way are dropped
// when they arrive); the caller gives its next input a new id.
func (d *DuplexRequest) ClearTurnInput(turn int) {
	if d.turns != nil {
		d.turns.abandon(turn)
	}
}

// MarkInputEnd records where the user's input of turn ended (commit, speech_stopped, item
// create); input end → first output is measured from it.
func (d *DuplexRequest) MarkInputEnd(turn int, ts float64) {
	if d.turns != nil {
		d.turns.markInputEnd(turn, ts)
	}
}

// ObserveBargeIn records a server-VAD barge-in's latency (speech onset → response cut).
func (d *DuplexRequest) ObserveBargeIn(latencyS float64) {
	d.c.opts.Collectors.BargeIn(latencyS)
}

// AppendText adds a history message, input of turn, after every earlier append.
func (d *DuplexRequest) AppendText(ctx context.Context, turn int, role, text string) error {
	if err := d.barrier(ctx, func(ctx context.Context) error { return d.stream.AppendText(ctx, turn, role, text) }); err != nil {
		return fmt.Errorf("appending text: %w", err)
	}
	return nil
}

// respond runs start in the FIFO, telling the turn book that turn's response may start.
func (d *DuplexRequest) respond(ctx context.Context, turn int, start func(context.Context) (int, error)) (int, error) {
	if d.turns != nil {
		d.turns.respondStart(turn)
	}
	var n int
	err := d.barrier(ctx, func(ctx context.Context) error {
		var err error
		n, err = start(ctx)
		return err
	})
	if d.turns != nil {
		d.turns.respondEnd(turn, n)
	}
	if err != nil {
		return 0, fmt.Errorf("starting a response: %w", err)
	}
	return n, nil
}

// Signal applies a turn signal: barge_in, input.cancel and response.cancel stop the current
// response's engine work at once, finalize its turn metrics (a no-op when end_response already
// did) and move the request state to the next epoch's id, finalizing before the state drop.
//
// A signal whose next fence is the current one moves no epoch: it re-stops work of a response
// the session already ended (a cancelled job that still started a turn). It must not finalize
// the turn that is open now, which belongs to a newer response.
func (d *DuplexRequest) Signal(ctx context.Context, event string, next Fence) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("signal %q: %w", event, err)
	}
	reason := metrics.ReasonCancel
	switch event {
	case "barge_in":
		reason = metrics.ReasonBargeIn
	case "input.cancel", "response.cancel":
	default:
		return fmt.Errorf("signal %q: unsupported event", event)
	}
	if d.closed.Load() {
		return errDuplexClosed
	}
	d.stream.CancelResponse(false)
	d.mu.Lock()
	moves := next != d.fence
	d.mu.Unlock()
	if moves && d.turns != nil {
		d.turns.finalize(d.turns.current(), reason, false)
	}
	d.mu.Lock()
	old := d.fence
	if next.SessionID == old.SessionID && (next.Epoch != old.Epoch || next.Incarnation != old.Incarnation) {
		d.fence = next
	}
	cur := d.fence
	d.mu.Unlock()
	if cur != old {
		d.c.unregister(old.stage0ID())
		d.c.register(cur.stage0ID(), "duplex")
	}
	return nil
}

// settleInput runs after every earlier append, commit and text and asks the stream to report
// once the rows of turn's input were delivered; a turn EndTurn closed unstarted is recorded
// then (at once when the stream cannot report it).
func (d *DuplexRequest) settleInput(ctx context.Context, turn int) error {
	if d.turns == nil {
		return nil
	}
	err := d.barrier(ctx, func(ctx context.Context) error { return d.stream.SettleInput(ctx, turn) })
	if err != nil {
		d.turns.settleFailed(turn)
		return fmt.Errorf("settling input: %w", err)
	}
	return nil
}

// CancelTurn stops the engine work of turn n only (see stage.DuplexStream.CancelTurn); it
// neither closes the turn (its owner does) nor moves the fence.
func (d *DuplexRequest) CancelTurn(n int) {
	if d.closed.Load() {
		return
	}
	d.stream.CancelTurn(n, false)
}

// Close finalizes the open turn with reason (close unless given), stops the FIFO and closes the
// stream, then drops the request state. It returns when that is done, or with ctx's error when
// ctx ends first: the session actor calling it must not hang on a wedged stage. The shutdown
// then goes on in the background and ends with the stages' work (a pipeline Close cancels all
// of it); shutdownDone is closed when it has.
func (d *DuplexRequest) Close(ctx context.Context, reason string) error {
	if reason == "" {
		reason = metrics.ReasonClose
	}
	done := make(chan struct{})
	go func() { defer close(done); d.shutdown(reason) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		d.log.Warn("duplex close: the stages have not finished; going on without waiting",
			zap.String("request_id", d.Stage0ID()), zap.Error(context.Cause(ctx)))
		return fmt.Errorf("closing the duplex stream: %w", context.Cause(ctx))
	}
}

// Abort stops everything at once; the open turn is finalized with reason abort.
func (d *DuplexRequest) Abort() { d.shutdown(metrics.ReasonAbort) }

func (d *DuplexRequest) shutdown(reason string) {
	if !d.closed.CompareAndSwap(false, true) {
		return
	}
	if reason == metrics.ReasonAbort {
		d.stream.CancelResponse(false)
	}
	// The stream's close is the owner's close of every turn still open.
	if d.turns != nil {
		for id := d.turns.current(); id > 0; id = d.turns.current() {
			d.turns.finalize(id, reason, false)
		}
	}
	if d.cancel != nil {
		d.cancel()
	}
	d.wg.Wait()
	// Close delivers every partial snapshot of the aborted work (and the stage-turn ends) before
	// it returns; the interrupted turns are finalized with them, the rest right after.
	d.stream.Close()
	if d.turns != nil {
		d.turns.flush(reason)
		if ids := d.turns.unclosed(); len(ids) > 0 {
			d.log.Warn(UnclosedTurnsMessage, zap.Ints("turns", ids))
		}
	}
	if !d.opened.IsZero() {
		d.c.opts.Collectors.SessionClosed(time.Since(d.opened).Seconds())
	}
	d.c.unregister(d.Stage0ID())
}

// Sink implementation: called by the pipeline in order for this stream.

// OnOutput forwards the output and ingests attached metrics into the turn. Listen/speak decision
// snapshots already arrived as StageMetricsMessages, so they are not counted twice.
func (d *DuplexRequest) OnOutput(m stage.OutputMessage) {
	if d.turns != nil {
		if m.Metrics != nil && m.Kind != duplex.OutDecision {
			d.turns.ingest(m.Turn, m.StageID, *m.Metrics, "", m.StageSubmitTS)
		}
		d.turns.output(m)
	}
	if d.out != nil && !d.closed.Load() {
		d.out(m.Output)
	}
}

// OnStageMetrics ingests a stage snapshot into the turn it is tagged with. An aborted
// response's partial rows arrive after the session closed it; they go to its own (closing)
// turn, never to the next one.
func (d *DuplexRequest) OnStageMetrics(m stage.StageMetricsMessage) {
	if d.turns == nil {
		return
	}
	d.turns.ingest(m.Turn, m.StageID, m.Metrics, m.FinalOutputType, m.StageSubmitTS)
}

// OnTransfer records one connector send on its turn's edge.
func (d *DuplexRequest) OnTransfer(t stage.TransferEvent) {
	if d.turns == nil {
		return
	}
	d.turns.transfer(t)
}

// OnTurnEnd is the stages' report that turn n's response is finished, or its input settled
// (stage.TurnEndSink).
func (d *DuplexRequest) OnTurnEnd(e stage.TurnEnd) {
	if d.turns == nil {
		return
	}
	if e.InputSettled {
		d.turns.inputSettled(e.Turn)
		return
	}
	d.turns.turnEnd(e.Turn)
}

// MarkTurnArrival stamps turn's t0 (keep first; the turn is born at its first input) and
// returns it; with LogStats off it returns ts and records nothing.
func (d *DuplexRequest) MarkTurnArrival(turn int, ts float64) float64 {
	if d.turns == nil {
		return ts
	}
	if a, ok := d.turns.arrival(turn); ok {
		return a // keep first; and the per-chunk path builds no resource id
	}
	return d.turns.markArrival(turn, d.Stage0ID(), ts)
}

// UnclosedTurnsMessage is the warning a stream logs at its close when turns were recorded
// without their owner closing them; the end-to-end tests fail on it.
const UnclosedTurnsMessage = "turns were recorded without their owner closing them"

// Unclosed returns the ids of turns recorded without their owner closing them (a newer turn
// began first): each is a bug in the caller, which tests check for.
func (d *DuplexRequest) Unclosed() []int {
	if d.turns == nil {
		return nil
	}
	return d.turns.unclosed()
}
