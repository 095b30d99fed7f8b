package requestclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/stage"
)

// fakeStream records what the DuplexRequest drives into the stage stream and fails the appends the
// test names; it checks that no call arrives after Close. Its methods run on the DuplexRequest's
// worker, so they check with assert (t.Errorf), never require.
type fakeStream struct {
	t        *testing.T
	mu       sync.Mutex
	calls    []string
	failAt   map[int]bool // 1-based append numbers that fail
	appends  int
	closed   bool
	cancels  []bool
	respondN int
	gate     chan struct{} // when set, the first append waits for it (see gateFirstAppend)
	// closeGate, when set, holds Close until it is closed: a wedged stage.
	closeGate chan struct{}
	// respondShift is added to the id Respond returns: the stage answered that input by itself
	// (auto-response), so the response runs under the next id. respondGate, when set, holds
	// Respond until it is closed.
	respondShift int
	respondGate  chan struct{}
}

// gateFirstAppend holds the first append until want ops wait behind it, so a whole burst is
// queued before the failure is seen, as when a client sends faster than the engine appends.
// Without it the worker may fail append 1 before the test enqueued the rest, and those would
// rightly start a new chain.
func gateFirstAppend(fs *fakeStream, d *DuplexRequest, want int) {
	fs.gate = make(chan struct{})
	go func() {
		deadline := time.Now().Add(5 * time.Second)
		// queued counts what waits behind the first append only once the worker took that
		// one into the stream (it is held at the gate).
		for (fs.started() < 1 || d.queued() < want) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		close(fs.gate)
	}()
}

// started is the number of appends that entered the stream.
func (f *fakeStream) started() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.appends
}

func (f *fakeStream) record(c string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.False(f.t, f.closed, "%s after Close", c)
	f.calls = append(f.calls, c)
}

func (f *fakeStream) AppendAudio(_ context.Context, turn int, pcm []float32) error {
	assert.Positive(f.t, turn)
	assert.NotEmpty(f.t, pcm)
	f.mu.Lock()
	f.appends++
	n := f.appends
	f.mu.Unlock()
	if n == 1 && f.gate != nil {
		<-f.gate
	}
	f.record("append")
	if f.failAt[n] {
		return errors.New("append failed")
	}
	return nil
}

func (f *fakeStream) StartCommit(_ context.Context, turn int, respond bool) (func(context.Context) (duplex.Transcription, error), error) {
	assert.Positive(f.t, turn)
	f.record("commit")
	return func(context.Context) (duplex.Transcription, error) {
		return duplex.Transcription{Text: "go forward"}, nil
	}, nil
}

func (f *fakeStream) SetTranscriptLogprobs(_ context.Context, on bool) error {
	f.record(fmt.Sprintf("logprobs:%v", on))
	return nil
}

func (f *fakeStream) DiscardAudio(context.Context) error {
	f.record("discard")
	return nil
}

func (f *fakeStream) AppendText(_ context.Context, turn int, role, text string) error {
	assert.Positive(f.t, turn)
	assert.NotEmpty(f.t, role)
	f.record("text:" + role + ":" + text)
	return nil
}

// Respond runs the response under the id it is given, as the stage does for input it has not
// answered by itself.
func (f *fakeStream) Respond(_ context.Context, turn, maxTokens int) (int, error) {
	assert.Positive(f.t, turn)
	if f.respondGate != nil {
		<-f.respondGate
	}
	f.record("respond")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.respondN++
	return turn + f.respondShift, nil
}

func (f *fakeStream) CancelResponse(keep bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancels = append(f.cancels, keep)
}

func (f *fakeStream) CancelTurn(n int, _ bool) {
	f.record(fmt.Sprintf("cancel_turn:%d", n))
}

func (f *fakeStream) SettleInput(_ context.Context, turn int) error {
	f.record(fmt.Sprintf("settle:%d", turn))
	return nil
}

func (f *fakeStream) Close() {
	if f.closeGate != nil {
		<-f.closeGate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
}

func (f *fakeStream) callList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

type outputs struct {
	mu  sync.Mutex
	all []duplex.Output
}

func (o *outputs) add(m duplex.Output) {
	o.mu.Lock()
	o.all = append(o.all, m)
	o.mu.Unlock()
}

func (o *outputs) errors() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, m := range o.all {
		if m.Kind == duplex.OutError {
			n++
		}
	}
	return n
}

func newTestDuplex(t *testing.T, opts Options, log *zap.Logger, fs *fakeStream) (*DuplexRequest, *outputs, *Client) {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	c := New(nil, opts, log)
	out := &outputs{}
	d := c.newDuplex(Fence{SessionID: "duplex-test", Epoch: 0}, "", 2, out.add)
	d.start(fs)
	return d, out, c
}

func TestDuplexAppendsFIFOFailureStopsChain(t *testing.T) {
	fs := &fakeStream{t: t, failAt: map[int]bool{2: true}}
	d, out, c := newTestDuplex(t, Options{}, zap.NewNop(), fs)
	gateFirstAppend(fs, d, 4) // appends 2-4 and the commit
	ctx := context.Background()
	for range 4 {
		require.NoError(t, d.AppendAudio(ctx, 1, []float32{0.1}))
	}
	// The barrier runs after the queued appends; it belongs to the failed chain, so it is skipped.
	_, err := d.Commit(ctx, 1, false)
	require.Error(t, err)
	require.Equal(t, []string{"append", "append"}, fs.callList(), "appends 3 and 4 never ran")
	require.Equal(t, 1, out.errors(), "the failure is reported once")
	// A later command starts a new chain.
	require.NoError(t, d.AppendAudio(ctx, 1, []float32{0.2}))
	tr, err := d.Commit(ctx, 1, false)
	require.NoError(t, err)
	require.Equal(t, "go forward", tr.Text)
	turn, err := d.Respond(ctx, NewTurn(1), duplex.ResponseSpec{MaxTokens: 4})
	require.NoError(t, err)
	require.Equal(t, 1, turn)
	require.Equal(t, []string{"append", "append", "append", "commit", "respond"}, fs.callList())
	require.Equal(t, 1, c.Live())
	require.NoError(t, d.Close(ctx, ""))
	require.Equal(t, 0, c.Live())
	_, err = d.Commit(ctx, 1, false)
	require.ErrorIs(t, err, errDuplexClosed)
}

// An append that fails while the stream is being closed (its output could not be delivered
// any more) is not reported as an engine failure: the session closed the stream itself.
func TestDuplexAppendFailingAtCloseIsNotReported(t *testing.T) {
	fs := &fakeStream{t: t, failAt: map[int]bool{1: true}, gate: make(chan struct{})}
	d, out, _ := newTestDuplex(t, Options{}, zap.NewNop(), fs)
	ctx := context.Background()
	require.NoError(t, d.AppendAudio(ctx, 1, []float32{0.1}))
	// The append must be in the stream (held at the gate) before the close begins; queued
	// behind a closing stream it would rightly never run.
	require.Eventually(t, func() bool { return fs.started() == 1 }, 5*time.Second, time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- d.Close(ctx, "") }()
	require.Eventually(t, func() bool { return d.closed.Load() }, 5*time.Second, time.Millisecond)
	close(fs.gate) // the in-flight append now fails, as one whose output the closing stream refused
	require.NoError(t, <-closed)
	require.Equal(t, []string{"append"}, fs.callList())
	require.Zero(t, out.errors(), "a failure of the stream's own close is not an engine error")
}

// The logprobs setting runs in wire order with the appends and commits around it, even after a
// failed append (the setting is the session's, not the chain's).
func TestDuplexTranscriptLogprobsInOrder(t *testing.T) {
	fs := &fakeStream{t: t, failAt: map[int]bool{1: true}}
	d, _, _ := newTestDuplex(t, Options{}, zap.NewNop(), fs)
	gateFirstAppend(fs, d, 2) // append 2 and the setting: queued before append 1 fails
	ctx := context.Background()
	require.NoError(t, d.AppendAudio(ctx, 1, []float32{0.1}))
	require.NoError(t, d.AppendAudio(ctx, 1, []float32{0.1}))
	require.NoError(t, d.SetTranscriptLogprobs(ctx, true))
	require.NoError(t, d.AppendAudio(ctx, 1, []float32{0.2}))
	_, err := d.Commit(ctx, 1, false)
	require.NoError(t, err)
	require.NoError(t, d.SetTranscriptLogprobs(ctx, false))
	require.Equal(t, []string{"append", "logprobs:true", "append", "commit", "logprobs:false"}, fs.callList())
}

// A discard (input_audio_buffer.clear) runs in wire order behind the appends it drops, even
// when one of them failed and the rest of their chain is skipped: the ASR must forget them.
func TestDuplexDiscardRunsAfterFailedChain(t *testing.T) {
	fs := &fakeStream{t: t, failAt: map[int]bool{1: true}}
	d, out, _ := newTestDuplex(t, Options{}, zap.NewNop(), fs)
	gateFirstAppend(fs, d, 3) // append 2, the discard and the commit: queued before append 1 fails
	ctx := context.Background()
	require.NoError(t, d.AppendAudio(ctx, 1, []float32{0.1}))
	require.NoError(t, d.AppendAudio(ctx, 1, []float32{0.1}))
	require.NoError(t, d.DiscardAudio(ctx))
	_, err := d.Commit(ctx, 1, false)
	require.Error(t, err, "the commit belongs to the failed chain")
	require.Equal(t, []string{"append", "discard"}, fs.callList(), "append 2 is skipped with its chain; the discard still runs")
	require.NoError(t, d.AppendAudio(ctx, 1, []float32{0.3}))
	tr, err := d.Commit(ctx, 1, false)
	require.NoError(t, err)
	require.Equal(t, "go forward", tr.Text)
	require.Equal(t, []string{"append", "discard", "append", "commit"}, fs.callList())
	require.Equal(t, 1, out.errors())
	require.NoError(t, d.Close(ctx, ""))
}

func TestDuplexBackpressure(t *testing.T) {
	block := make(chan struct{})
	fs := &blockingStream{fakeStream: fakeStream{t: t}, block: block}
	c := New(nil, Options{}, zap.NewNop())
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	d := c.newDuplex(Fence{SessionID: "duplex-bp"}, "", 2, func(duplex.Output) {})
	d.start(fs)
	big := make([]float32, maxPendingInputBytes/4/2+1)
	require.NoError(t, d.AppendAudio(context.Background(), 1, big))
	require.ErrorIs(t, d.AppendAudio(context.Background(), 1, big), ErrInputBackpressure)
	close(block)
	require.Eventually(t, func() bool { return d.pending.Load() == 0 }, 5*time.Second, time.Millisecond)
	require.NoError(t, d.AppendAudio(context.Background(), 1, big))
	require.NoError(t, d.Close(context.Background(), ""))
}

// A stalled ASR never blocks the caller (the session actor): with 20 ms appends queued far past
// the old 256-slot channel, enqueue answers at once; once the stall passes maxInputStall, new
// input fails fast with ErrInputBackpressure; a signal (cancel, barge-in) and Close still work
// while the stream is stuck inside an append.
func TestDuplexStalledASRNeverBlocksTheActor(t *testing.T) {
	fs := &blockingStream{fakeStream: fakeStream{t: t}, block: make(chan struct{})}
	c := New(nil, Options{}, zap.NewNop())
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	d := c.newDuplex(Fence{SessionID: "duplex-stall"}, "", 2, func(duplex.Output) {})
	var clockMu sync.Mutex
	now := time.Unix(1000, 0)
	d.now = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	advance := func(dt time.Duration) { clockMu.Lock(); now = now.Add(dt); clockMu.Unlock() }
	d.start(fs)
	ctx := context.Background()
	chunk := make([]float32, 320) // 20 ms at 16 kHz, 1280 bytes

	start := time.Now()
	for i := range 2000 { // 2.5 MB: far more ops than the old channel held, well under the byte bound
		require.NoError(t, d.AppendAudio(ctx, 1, chunk), "append %d", i)
	}
	require.Less(t, time.Since(start), time.Second, "2000 appends behind a stalled ASR must not wait")

	// The worker must hold append 1 in the stalled stream before the clock moves: popped later,
	// it would stamp progress at the advanced time and hide the stall from the commit below.
	require.Eventually(t, func() bool { return d.queued() == 1999 }, 5*time.Second, time.Millisecond)
	advance(maxInputStall + time.Millisecond)
	start = time.Now()
	err := d.AppendAudio(ctx, 1, chunk)
	require.ErrorIs(t, err, ErrInputBackpressure)
	require.Contains(t, err.Error(), "no input for")
	require.Less(t, time.Since(start), 100*time.Millisecond)
	// A commit (through the job goroutine) fails the same way instead of queueing forever.
	_, err = d.Commit(ctx, 1, false)
	require.ErrorIs(t, err, ErrInputBackpressure)
	// A discard only lightens the work: it is still accepted.
	require.NoError(t, d.DiscardAudio(ctx))

	// Cancel and barge-in are served while the stream is stuck.
	require.NoError(t, d.Signal(ctx, "response.cancel", Fence{SessionID: "duplex-stall", Epoch: 1}))
	require.NoError(t, d.Signal(ctx, "barge_in", Fence{SessionID: "duplex-stall", Epoch: 2}))
	fs.mu.Lock()
	require.Len(t, fs.cancels, 2)
	fs.mu.Unlock()

	// Close stops the stuck append (its ctx is cancelled) and drops everything queued.
	closeCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start = time.Now()
	require.NoError(t, d.Close(closeCtx, ""))
	require.Less(t, time.Since(start), time.Second)
	require.Equal(t, 0, c.Live())
	require.ErrorIs(t, d.AppendAudio(ctx, 1, chunk), errDuplexClosed)
}

// The byte bound counts ops without audio too, so the queue is bounded in count as well.
func TestDuplexQueueBoundedInCount(t *testing.T) {
	fs := &blockingStream{fakeStream: fakeStream{t: t}, block: make(chan struct{})}
	c := New(nil, Options{}, zap.NewNop())
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	d := c.newDuplex(Fence{SessionID: "duplex-count"}, "", 2, func(duplex.Output) {})
	d.start(fs)
	ctx := context.Background()
	require.NoError(t, d.AppendAudio(ctx, 1, []float32{0.1})) // the runner is stuck in this one
	require.Eventually(t, func() bool { return d.queued() == 0 }, 5*time.Second, time.Millisecond)
	var err error
	n := 0
	for ; n < maxPendingInputBytes/opOverhead+10; n++ {
		if err = d.DiscardAudio(ctx); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, ErrInputBackpressure)
	require.Equal(t, maxPendingInputBytes/opOverhead-1, n, "the stuck append holds one op's worth")
	require.NoError(t, d.Close(ctx, ""))
}

type blockingStream struct {
	fakeStream
	block chan struct{}
}

func (b *blockingStream) AppendAudio(ctx context.Context, _ int, pcm []float32) error {
	select {
	case <-b.block:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func stageSnap(ms float64) metrics.StageRequestStats {
	return metrics.StageRequestStats{StageGenTimeMs: ms, NumTokensOut: 3, OutputUnitType: "text"}
}

func TestDuplexTurnMetricsSemantics(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	now := 100.0
	clock := func() float64 { return now }
	fs := &fakeStream{t: t}
	d, _, _ := newTestDuplex(t, Options{LogStats: true, Clock: clock}, zap.New(core), fs)

	// Keep-first arrival stamp: the turn is born at its first input.
	require.Equal(t, 42.0, d.MarkTurnArrival(1, 42))
	require.Equal(t, 42.0, d.MarkTurnArrival(1, 99))
	// Rows of the turn's input before its response began are kept, then merged into it.
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: stageSnap(5), StageSubmitTS: 43})
	d.BeginTurn(1, "resp-a", 1, d.MarkTurnArrival(1, 0))
	d.BeginTurn(1, "resp-a", 1, 0) // idempotent
	now = 101
	// The next turn's input, given while turn 1 is open, is its own from the start.
	require.Equal(t, 101.0, d.MarkTurnArrival(2, 0))
	require.True(t, d.finalizeTurn(1, "stop"))
	require.False(t, d.finalizeTurn(1, "stop"), "closing twice is a no-op")
	require.True(t, logged(logs, "response=resp-a", "reason=stop"))

	now = 102
	d.BeginTurn(2, "resp-b", 2, d.MarkTurnArrival(2, 0))
	require.Equal(t, 101.0, d.turns.openTurn(2).Arrival(), "the turn's t0 is its first input, not its begin")
	// A newer turn beginning while turn 2's owner never closed it: recorded as aborted, and
	// reported as a bug of the owner.
	d.BeginTurn(3, "resp-c", 3, 0)
	require.True(t, logged(logs, "response=resp-b", "reason=abort"))
	require.Equal(t, []int{2}, d.Unclosed())
	// Signal closes the current turn with barge_in before moving the state to the next epoch's id.
	require.NoError(t, d.Signal(context.Background(), "barge_in", Fence{SessionID: "duplex-test", Epoch: 1}))
	require.True(t, logged(logs, "response=resp-c", "reason=barge_in"))
	require.Equal(t, Fence{SessionID: "duplex-test", Epoch: 1}.stage0ID(), d.Stage0ID())
	// Close closes an open turn with close.
	d.BeginTurn(4, "resp-d", 4, 0)
	require.NoError(t, d.Close(context.Background(), ""))
	require.True(t, logged(logs, "response=resp-d", "reason=close"))
	require.False(t, d.finalizeTurn(4, "abort"), "nothing left after close")
}

// The stage may answer an input by itself (auto-response) while the owner's Respond for it
// waits in the FIFO; Respond then returns the next id, under which the response runs. The
// owner's turn, cancelled meanwhile, is recorded exactly once when Respond returns (no response
// runs under its id), and the next id's turn counts as started: its interrupted close waits for
// its stages' TurnEnd instead of being recorded without their rows.
func TestDuplexRespondReturnsTheNextID(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	fs := &fakeStream{t: t, respondShift: 1, respondGate: make(chan struct{})}
	clock := func() float64 { return 3 }
	d, _, _ := newTestDuplex(t, Options{LogStats: true, Clock: clock}, zap.New(core), fs)
	ctx := context.Background()
	count := func(parts ...string) int { return countLogged(logs, parts...) }

	d.BeginTurn(1, "resp-a", 1, d.MarkTurnArrival(1, 1))
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := d.Respond(ctx, NewTurn(1), duplex.ResponseSpec{MaxTokens: 8})
		done <- result{n, err}
	}()
	require.Eventually(t, func() bool { return d.turns.openTurn(1) != nil && responding(d, 1) == 1 },
		5*time.Second, time.Millisecond, "Respond(1) is in flight")
	require.True(t, d.finalizeTurn(1, metrics.ReasonCancel))
	require.Zero(t, count("response=resp-a"), "a response may still start under turn 1: wait for Respond")
	d.MarkTurnArrival(2, 2) // the next input, answered by the stage's own response

	close(fs.respondGate)
	res := <-done
	require.NoError(t, res.err)
	require.Equal(t, 2, res.n, "the response runs under the next id")
	require.Eventually(t, func() bool { return count("response=resp-a", "reason=cancel") > 0 },
		5*time.Second, time.Millisecond, "turn 1 is recorded once Respond says it ran under 2")

	d.BeginTurn(2, "resp-b", 2, 0)
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 2, Metrics: stageSnap(5)})
	require.True(t, d.finalizeTurn(2, metrics.ReasonBargeIn))
	require.Zero(t, count("response=resp-b"), "turn 2 started: its close waits for its stages")
	d.OnTurnEnd(stage.TurnEnd{Turn: 2})
	require.Positive(t, count("response=resp-b", "reason=barge_in"))
	require.NoError(t, d.Close(ctx, ""))
	require.Equal(t, 1, count("[OmniTiming]", "response=resp-a", "reason=cancel"), "turn 1 recorded exactly once")
	require.Equal(t, 1, count("[OmniTiming]", "response=resp-b", "reason=barge_in"))
	require.Equal(t, 1, count("StageRequestStats", "response=resp-b", "num_tokens_out"), "turn 2 kept its stage's rows")
	require.Empty(t, d.Unclosed())
}

// responding is how many Respond calls for turn id are in flight.
func responding(d *DuplexRequest, id int) int {
	d.turns.mu.Lock()
	defer d.turns.mu.Unlock()
	if e := d.turns.open[id]; e != nil {
		return e.responding
	}
	return -1
}

func logged(logs *observer.ObservedLogs, parts ...string) bool {
	return countLogged(logs, parts...) > 0
}

// countLogged counts the log messages that contain every part.
func countLogged(logs *observer.ObservedLogs, parts ...string) int {
	n := 0
	for _, e := range logs.All() {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(e.Message, p)
		}
		if ok {
			n++
		}
	}
	return n
}

func TestDuplexLogStatsOffAllocatesNothing(t *testing.T) {
	fs := &fakeStream{t: t}
	d, _, _ := newTestDuplex(t, Options{}, zap.NewNop(), fs)
	require.Nil(t, d.turns)
	msg := stage.StageMetricsMessage{StageID: 0, Metrics: stageSnap(5), StageSubmitTS: 1}
	allocs := testing.AllocsPerRun(1000, func() {
		d.OnStageMetrics(msg)
		d.MarkTurnArrival(1, 1)
		d.BeginTurn(1, "resp-x", 1, 1)
		d.finalizeTurn(1, "stop")
	})
	require.Zero(t, allocs)
	require.NoError(t, d.Close(context.Background(), ""))
}

// CancelTurn stops one turn's engine work (a response the session cancelled before Respond
// returned): the stream cancels that turn only, the fence does not move, the open turn stays
// open, and rows of the cancelled turn never reach it. After Close it does nothing.
func TestDuplexCancelTurn(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	fs := &fakeStream{t: t}
	d, _, _ := newTestDuplex(t, Options{LogStats: true}, zap.New(core), fs)
	ctx := context.Background()
	stage0 := d.Stage0ID()
	d.BeginTurn(2, "resp-b", 2, d.MarkTurnArrival(2, 1))
	d.CancelTurn(1)
	require.Equal(t, []string{"cancel_turn:1"}, fs.callList())
	require.Equal(t, stage0, d.Stage0ID(), "the fence does not move")
	// The cancelled turn's partial rows arrive after; the open turn's own rows follow.
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: metrics.StageRequestStats{NumTokensOut: 50, OutputUnitType: "text"}})
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 2, Metrics: stageSnap(5)})
	require.Empty(t, logs.All(), "nothing finalized")
	require.True(t, d.finalizeTurn(2, "stop"))
	var table string
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "response=resp-b") && strings.Contains(e.Message, "num_tokens_out") {
			table = e.Message
		}
	}
	require.NotEmpty(t, table, "resp-b's stage table")
	require.Regexp(t, `num_tokens_out\s*\|\s*3\s*\|`, table, "only turn 2's rows")
	require.NoError(t, d.Close(ctx, ""))
	d.CancelTurn(2) // the stream is closed: fakeStream fails any call after Close
	require.Equal(t, []string{"cancel_turn:1"}, fs.callList())
}

// A wedged stage must not hang the session actor: Close returns with ctx's error when ctx ends,
// the shutdown finishes once the stage lets go, and the turn is still finalized exactly once.
func TestDuplexCloseHonoursContext(t *testing.T) {
	fs := &fakeStream{t: t, closeGate: make(chan struct{})}
	d, _, _ := newTestDuplex(t, Options{}, zap.NewNop(), fs)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := d.Close(ctx, "")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 5*time.Second, "Close waited for the wedged stage")
	require.ErrorIs(t, d.Signal(ctx, "response.cancel", Fence{SessionID: "duplex-test", Epoch: 1}), context.DeadlineExceeded)

	close(fs.closeGate) // the stage lets go: the shutdown completes in the background
	require.Eventually(t, func() bool {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		return fs.closed
	}, 5*time.Second, time.Millisecond)
	require.NoError(t, d.Close(context.Background(), ""), "a second Close is a no-op")
}
