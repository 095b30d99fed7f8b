package stage

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/metrics"
)

// conversation is the speaking side of a duplex stream: the history as the model should see
// it, the KV sequence that holds its rendering, the responses (plain, per-response and
// speculative: duplex_respond.go), the tools declared in it, and the listen/speak decision at
// an endpoint. Its state is guarded by mu; the sequence and the record of what it holds
// (fedText, decl.fed, decl.mark) are touched only by the stream's sequence goroutine, which
// runs the jobs the conversation queues on jobs, in order.
type conversation struct {
	p    *Pipeline
	opts DuplexOptions
	rid  string
	disp *dispatcher
	ctx  context.Context //nolint:containedctx // the stream's lifetime; Close cancels it
	seq  *gpu.Sequence   // nil with a remote thinker: the conversation lives in history only
	jobs chan<- seqJob   // the sequence goroutine's queue (DuplexStream.loop)
	// closed is closed, under mu, when the stream closes: nothing is queued after it.
	closed chan struct{}

	mu  sync.Mutex
	ids turnIDs
	// live are the responses not finished; gen is the one generating now.
	live  map[*turnState]struct{}
	gen   *turnState
	spec  *speculation // a response started before its endpoint (preempt.go)
	specs specCounts
	// history is the conversation as the model should see it; fedText is the rendering of it
	// the sequence already holds.
	history []gpu.ChatMessage
	fedText string
	// keeper keeps the conversation within its token budget (duplex_budget.go). Sequence
	// goroutine.
	keeper tokenKeeper
	// stopPrefill cancels the prefill job running now (nil: none), for cancel: a response's
	// cancel or the stream's close stops the engine's work at its next step, the prefill of
	// the input it would have read included. The input stays in the history; the next job
	// prefills it (syncHistoryTo records what the sequence holds only after a prefill).
	stopPrefill context.CancelFunc
	// queuedPrefill is the turn of a message prefill queued and not begun yet (0: none): it
	// syncs the whole history when it runs, so a burst of messages for the same turn (a client
	// restoring a conversation) queues one job, not one each, and leaves the queue to the
	// response that follows.
	queuedPrefill int
	// prefilled counts the tokens of prefill jobs by the turn their statistics rows are billed
	// to; the turn's response takes them into its usage (duplex_usage.go).
	prefilled map[int]int
	// tools are the stream's tools (SetTools), for the responses it starts by itself; decl
	// is their declaration in the conversation (duplex_tools.go).
	tools *duplex.ToolSpec
	decl  toolsDecl
	// scoreEOT replaces the thinker's end-of-turn estimate in unit tests (duplex_eot.go).
	scoreEOT func(text string) (EndOfTurn, error)
}

// turnIDs numbers the conversation's turns with the caller's ids. The caller (the session)
// numbers turns; the stream reports its ids, never a count of its own.
type turnIDs struct {
	// input is the turn id the listen side's rows carry: the id the caller gave with its last
	// input (AppendAudio, StartCommit, AppendText), or the one after the last response the
	// stream started, whichever is higher.
	input int
	// answered is the highest turn id a response was started for: a response's id is never
	// reused, and input given with an answered id belongs to the next turn.
	answered int
}

// given takes the caller's turn id of the input it gives now (<= 0: keep the current one) and
// returns the id the input is counted under. An id whose response already started is the next
// turn's: the stream answered that input by itself (an auto-response endpoint) before the
// caller knew.
func (t *turnIDs) given(turn int) int {
	if turn > 0 {
		t.input = max(turn, t.answered+1)
	}
	return t.input
}

// answer records that turn n's response started: input from now on is the next turn's.
func (t *turnIDs) answer(n int) {
	t.answered = max(t.answered, n)
	t.input = max(t.input, n+1)
}

func newConversation(ctx context.Context, p *Pipeline, opts DuplexOptions, disp *dispatcher, seq *gpu.Sequence, jobs chan<- seqJob) *conversation {
	return &conversation{
		p: p, opts: opts, rid: opts.RequestID, disp: disp, ctx: ctx, seq: seq, jobs: jobs,
		closed: make(chan struct{}), ids: turnIDs{input: 1}, live: map[*turnState]struct{}{},
		prefilled: map[int]int{},
	}
}

// upcoming is the turn id that listen-side rows carry (turnIDs.input).
func (c *conversation) upcoming() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ids.input
}

// setInput takes the caller's turn id of the input it gives now (turnIDs.given).
func (c *conversation) setInput(turn int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ids.given(turn)
}

func (c *conversation) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// close marks the conversation closed and aborts its responses and speculation; the stream
// then cancels its ctx and waits for the sequence goroutine.
func (c *conversation) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.closed)
	c.dropSpecLocked("stream closed")
	for ts := range c.live {
		ts.abort(false)
	}
}

// addMessage adds a message as input of turn (<= 0: the current input).
func (c *conversation) addMessage(turn int, role, text string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isClosed() {
		return fmt.Errorf("appending to stream: %w", ErrClosed)
	}
	c.dropSpecLocked("conversation changed")
	// The rows of the prefill belong to the turn whose input the message is, fixed now: the
	// response that answers it may start before the loop runs the job. The message carries
	// it too: truncation drops whole turns (duplex_budget.go).
	n := c.ids.given(turn)
	c.history = append(c.history, gpu.ChatMessage{Role: role, Content: text, Turn: n})
	if c.queuedPrefill == n {
		return nil // the queued prefill of this turn will take it
	}
	select {
	case c.jobs <- seqJob{turn: n}:
		c.queuedPrefill = n
	default:
		// A prefill job is queued or a response is pending; either syncs the whole history.
	}
	return nil
}

// prefillBegins notes that c's queued prefill of turn has begun (or been refused): a message
// from now on queues a prefill of its own. (A function, not a method: conversation is at its
// ceiling.)
func prefillBegins(c *conversation, turn int) {
	c.mu.Lock()
	if c.queuedPrefill == turn {
		c.queuedPrefill = 0
	}
	c.mu.Unlock()
}

// settleTurn is the id of the input a SettleInput marker settles (turn <= 0: the current one).
func (c *conversation) settleTurn(turn int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isClosed() {
		return 0, ErrClosed
	}
	if turn <= 0 {
		turn = c.ids.input
	}
	return turn, nil
}

// startResponse queues the response of turn (<= 0: the current input's) with per-response
// options rspec (nil: a plain response) and returns its turn.
func (c *conversation) startResponse(turn, maxTokens int, rspec *duplex.ResponseSpec) (*turnState, error) {
	if maxTokens <= 0 {
		maxTokens = c.opts.MaxTokens
	}
	p := c.p
	if err := p.thinker.admit(); err != nil {
		return nil, fmt.Errorf("admitting to stage thinker: %w", err)
	}
	if err := p.admitTalker(c.opts.WantAudio); err != nil {
		p.thinker.unadmit()
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isClosed() {
		c.unadmit()
		return nil, fmt.Errorf("starting response: %w", ErrClosed)
	}
	c.dropSpecLocked("response requested")
	ts := newTurn(c.ctx, c.ids.given(turn))
	select {
	case c.jobs <- seqJob{ts: ts, maxTokens: maxTokens, rspec: rspec}:
	default:
		ts.cancel()
		c.unadmit()
		return nil, fmt.Errorf("starting response: %w", ErrQueueFull)
	}
	c.ids.answer(ts.n)
	c.live[ts] = struct{}{}
	return ts, nil
}

// unadmit gives back the stage places a response was admitted to.
func (c *conversation) unadmit() {
	c.p.thinker.unadmit()
	c.unadmitTalker()
}

// unadmitTalker gives back the talker place of a response that will not reach the talker.
func (c *conversation) unadmitTalker() {
	if c.opts.WantAudio {
		c.p.talker.unadmit()
	}
}

// cancel aborts the unfinished responses that match (DuplexStream.CancelResponse, CancelTurn),
// and the prefill of input running for them.
func (c *conversation) cancel(keepHistory bool, match func(*turnState) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.live[c.gen]; ok && match(c.gen) && c.seq != nil {
		// An unconfirmed speculation (not live yet) is not a response of the caller's.
		// Abort the engine first: its keepHistory must win over the ctx-cancel path, which keeps.
		c.seq.Abort(keepHistory)
	}
	for ts := range c.live {
		if match(ts) {
			ts.abort(keepHistory)
			if c.stopPrefill != nil {
				c.stopPrefill()
			}
		}
	}
}

// setGen records the response generating now (nil: none).
func (c *conversation) setGen(ts *turnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen = ts
}

func (c *conversation) finishTurn(ts *turnState) {
	c.mu.Lock()
	delete(c.live, ts)
	c.mu.Unlock()
	ts.cancel()
	// Both stages returned, and each delivered its snapshot of the turn (turnMetrics) before:
	// the statistics may finalize an interrupted turn now.
	c.disp.turnEnd(ts, c.rid)
	close(ts.done)
}

// syncHistory prefills the part of the rendered history the sequence does not have yet.
func (c *conversation) syncHistory(ctx context.Context, addGen bool) (gpu.AppendStats, error) {
	c.mu.Lock()
	hist := append([]gpu.ChatMessage(nil), c.history...)
	c.mu.Unlock()
	return c.syncHistoryTo(ctx, hist, addGen)
}

// syncHistoryTo prefills the part of hist's rendering the sequence does not have yet.
func (c *conversation) syncHistoryTo(ctx context.Context, hist []gpu.ChatMessage, addGen bool) (gpu.AppendStats, error) {
	if c.seq == nil {
		return gpu.AppendStats{}, nil // remote thinker: each response sends the whole history
	}
	c.mu.Lock()
	fed := c.fedText
	c.mu.Unlock()
	if len(hist) == 0 && !addGen {
		return gpu.AppendStats{}, nil
	}
	want, err := c.p.deps.Engine.ChatPrompt(hist, addGen)
	if err != nil {
		return gpu.AppendStats{}, fmt.Errorf("rendering conversation: %w: %w", ErrTemplate, err)
	}
	delta, ok := strings.CutPrefix(want, fed)
	if !ok {
		// The sequence's text is no prefix of the rendering (an aborted reply left its header):
		// append the newest message rendered alone rather than re-prefilling everything.
		last := hist[max(len(hist)-1, 0):]
		if delta, err = c.p.deps.Engine.ChatPrompt(last, addGen); err != nil {
			return gpu.AppendStats{}, fmt.Errorf("rendering conversation: %w: %w", ErrTemplate, err)
		}
	}
	if delta == "" {
		return gpu.AppendStats{}, nil
	}
	st, err := c.seq.AppendText(ctx, delta)
	if err != nil {
		return gpu.AppendStats{}, fmt.Errorf("prefilling conversation: %w", err)
	}
	c.mu.Lock()
	c.fedText = want
	c.mu.Unlock()
	c.keeper.notePinned(hist, want, addGen, c.seq.HistoryLen())
	return st, nil
}

// prefill appends committed history and reports it as stage-0 work of turn, the turn that was
// upcoming when the history was added. A failure is reported as an Error output of turn.
func (c *conversation) prefill(turn int) error {
	c.mu.Lock()
	hist := slices.Clone(c.history)
	c.mu.Unlock()
	return c.prefillHistory(turn, hist)
}

// prefillHistory is prefill of hist, the history or a head of it. A cancel (conversation.cancel)
// stops it at the engine's next step; the history stays, for the next job to prefill.
func (c *conversation) prefillHistory(turn int, hist []gpu.ChatMessage) error {
	submitTS := metrics.Now()
	start := time.Now()
	ctx, stop := context.WithCancel(c.ctx)
	defer stop()
	c.mu.Lock()
	c.stopPrefill = stop
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.stopPrefill = nil
		c.mu.Unlock()
	}()
	st, err := c.syncHistoryTo(ctx, hist, false)
	if err != nil {
		if ctx.Err() == nil {
			c.p.log.Warn("duplex prefill failed", zap.String("request_id", c.rid), zap.Error(err))
			_ = c.disp.output(c.ctx, nil, OutputMessage{Output: duplex.Output{Kind: duplex.OutError, Turn: turn, Err: err}, RequestID: c.rid})
		}
		return err
	}
	if st.Tokens == 0 {
		return nil
	}
	// The tokens are billed to turn: its response takes them into its usage (duplex_usage.go).
	c.mu.Lock()
	c.prefilled[turn] += st.Tokens
	c.mu.Unlock()
	if st.SubmitTS > 0 {
		submitTS = st.SubmitTS
	}
	_ = c.disp.stageMetrics(c.ctx, nil, StageMetricsMessage{
		RequestID: c.rid, StageID: 0, Turn: turn, StageSubmitTS: submitTS, FinalOutputType: finalOutputType(c.opts.WantAudio),
		Metrics: metrics.StageRequestStats{
			BatchID: int(st.BatchID), BatchSize: st.BatchSize, NumTokensIn: st.Tokens,
			StageGenTimeMs: msSince(start), OutputUnitType: "text",
		},
	})
	return nil
}

// commitTranscript sends the Transcript output, adds the user message and optionally starts a
// response (returned; nil without respond), all as turn's.
func (c *conversation) commitTranscript(ctx context.Context, turn int, tr duplex.Transcription, respond bool, submitTS float64) (*turnState, error) {
	if err := c.disp.output(ctx, nil, OutputMessage{Output: duplex.Output{Kind: duplex.OutTranscript, Turn: turn, Text: tr.Text, WordLogprobs: tr.Logprobs}, RequestID: c.rid, StageID: 0, StageSubmitTS: submitTS}); err != nil {
		return nil, err
	}
	if tr.Text != "" && !c.opts.TranscribeOnly {
		if err := c.addMessage(turn, "user", tr.Text); err != nil {
			return nil, err
		}
	}
	if !respond {
		return nil, nil
	}
	var rspec *duplex.ResponseSpec
	if t := c.toolSpec(); t != nil {
		// The stream's own turn with the session's tools: declared, parsed or forced as a
		// response's own are.
		rspec = &duplex.ResponseSpec{Tools: t}
	}
	return c.startResponse(turn, 0, rspec)
}

// endpoint is a confirmed endpoint of the user's speech: its transcript, the speculation
// started on it when one was (kept only if it answered the same speech end and text), and how
// semantic_vad ended the turn (nil with server_vad).
type endpoint struct {
	tr  duplex.Transcription
	sp  *speculation
	eot *duplex.EndOfTurnDecision
}

// answer is the listen/speak decision of an audio unit whose endpoints are eps: each endpoint's
// transcript is committed and answered, by its confirmed speculation or a new response, and
// decision (a listen until then) becomes the last one's speak. It returns the speculations
// confirmed, whose held outputs the caller releases after the decision, and the last failure.
func (c *conversation) answer(ctx context.Context, eps []endpoint, decision *OutputMessage, submitTS float64) (confirmed []*speculation, err error) {
	for _, e := range eps {
		n, cerr := c.answerEndpoint(ctx, e, submitTS)
		if cerr != nil {
			err = cerr
			continue
		}
		if e.sp != nil {
			confirmed = append(confirmed, e.sp)
		}
		decision.Decision, decision.Turn, decision.EndOfTurn = duplex.DecisionSpeak, n, e.eot
	}
	return confirmed, err
}

// answerEndpoint commits one endpoint's transcript and returns the turn that answers it.
func (c *conversation) answerEndpoint(ctx context.Context, e endpoint, submitTS float64) (int, error) {
	if e.sp != nil {
		if err := c.confirmSpec(ctx, e.sp, e.tr.Logprobs, submitTS); err != nil {
			return 0, err
		}
		return e.sp.ts.n, nil
	}
	ts, err := c.commitTranscript(ctx, c.upcoming(), e.tr, true, submitTS)
	if err != nil {
		return 0, err
	}
	return ts.n, nil
}
