package stage

import (
	"fmt"
	"github.com/omniserve/omniserve/internal/duplex"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/metrics"
)

// reply is one response job on the sequence goroutine. Every response runs the same path
// (respond): take a thinker worker, put the prompt into a sequence, generate, and fold the reply
// into the conversation. Its kinds differ only in the prompt and in what stays afterwards:
//
//   - a plain response (Respond) reads the conversation with the generation prompt, in one
//     append; its reply stays in the sequence and joins the history;
//   - a ResponseSpec's reads the conversation plus its own instructions and tools declaration
//     (rolled back afterwards unless the reply can stay as a plain one would), or its own input
//     in a sequence of its own; out of band, its reply stays out of the history;
//   - a speculation's reads the conversation plus its provisional user message, prefilled as the
//     endpoint's prefill job would be, and waits for the endpoint's verdict: confirmed, the turn
//     stays; discarded, the sequence goes back to where it was.
type reply struct {
	c         *conversation
	ts        *turnState
	spec      duplex.ResponseSpec // zero for a plain response or a speculation
	rspec     bool                // the response has a ResponseSpec
	sp        *speculation        // set for a speculation
	maxTokens int

	r   *response
	g   generator
	own *gpu.Sequence // a response input's own sequence, closed after generation
	// at is where the reply goes in the history: after what was there when it began.
	at int
	// inSeq: the reply follows the conversation in the stream's sequence with nothing of the
	// response's own before it, so it can stay there as generated.
	inSeq bool
	// undo, when set, is where the sequence goes back to when the reply's context is not to
	// stay (undoes).
	undo *undoPoint
	hist []gpu.ChatMessage // a speculation's conversation with its user message
}

// undoPoint is a mark in the stream's sequence and the rendering it held there.
type undoPoint struct {
	mark      gpu.Mark
	fedBefore string
	what      string // for the log: what is rolled back
}

// respond runs a response job: plain (j.rspec and j.spec nil), with per-response options, or
// speculative.
func (c *conversation) respond(j seqJob) {
	defer c.finishTurn(j.ts)
	rp := newReply(c, j)
	text, generated := rp.run()
	rp.fold(text, generated)
}

// refuse ends a response job that the token budget refused (conversation.fit): its turn fails
// with err, before anything is prefilled.
func refuse(c *conversation, j seqJob, err error) {
	defer c.finishTurn(j.ts)
	rp := newReply(c, j)
	rp.newResponse()
	c.p.thinker.unadmit()
	rp.fail(err)
}

func newReply(c *conversation, j seqJob) *reply {
	rp := &reply{c: c, ts: j.ts, sp: j.spec, maxTokens: j.maxTokens, inSeq: true}
	if rp.maxTokens <= 0 {
		rp.maxTokens = c.opts.MaxTokens
	}
	if j.rspec != nil {
		rp.spec, rp.rspec = *j.rspec, true
	}
	if rp.sp != nil {
		// What the speculation is rolled back to when discarded: the conversation before it.
		u := &undoPoint{what: "a speculative turn"}
		if c.seq != nil {
			u.mark = c.seq.Mark()
		}
		c.mu.Lock()
		u.fedBefore = c.fedText
		rp.hist = append(slices.Clone(c.history), gpu.ChatMessage{Role: "user", Content: rp.sp.transcript, Turn: rp.ts.n})
		c.mu.Unlock()
		rp.undo = u
	}
	return rp
}

// run generates the reply; generated is false when it failed (reported) before generating.
func (rp *reply) run() (text string, generated bool) {
	p := rp.c.p
	if err := p.thinker.acquire(rp.ts.ctx); err != nil {
		rp.c.unadmitTalker()
		return "", false
	}
	defer p.thinker.release()
	defer rp.closeOwn()
	if err := rp.prompt(); err != nil {
		rp.fail(err)
		return "", false
	}
	opts, err := rp.generateOptions()
	if err != nil {
		rp.fail(err)
		return "", false
	}
	rp.c.setGen(rp.ts)
	text, _, _ = p.generate(rp.r, rp.g, opts)
	return text, true
}

func (rp *reply) newResponse() {
	c := rp.c
	rp.r = &response{rid: c.rid, ts: rp.ts, disp: c.disp, wantAudio: c.opts.WantAudio, started: time.Now(), submitTS: metrics.Now()}
}

// fail reports a failure before generation: as an abort when the turn was cancelled meanwhile.
func (rp *reply) fail(err error) {
	c := rp.c
	c.unadmitTalker()
	if rp.ts.ctx.Err() != nil || rp.ts.aborted.Load() {
		c.p.abortMetrics(rp.r, gpu.GenerateResult{}) // aborted while prefilling
		return
	}
	c.p.fail(rp.r, 0, err)
}

// generatorFor is the stream's sequence, or with a remote thinker a call that sends msgs.
func (rp *reply) generatorFor(msgs []gpu.ChatMessage) generator {
	c := rp.c
	if c.p.remote != nil {
		return remoteGen{t: c.p.remote, msgs: msgs, sampling: c.opts.Sampling}
	}
	return c.seq
}

func (rp *reply) prompt() error {
	switch {
	case rp.sp != nil:
		return rp.promptSpeculation()
	case rp.spec.Input != nil:
		return rp.promptInput()
	case rp.rspec:
		return rp.promptOwnContext()
	}
	return rp.promptPlain()
}

// promptPlain prefills the history with the generation prompt.
func (rp *reply) promptPlain() error {
	c := rp.c
	rp.newResponse()
	st, err := c.syncHistory(rp.ts.ctx, true)
	if err != nil {
		return err
	}
	rp.r.prefill = st
	rp.r.usage = c.promptUsage(rp.ts.n, st.Tokens, c.seq)
	c.mu.Lock()
	defer c.mu.Unlock()
	rp.at = len(c.history) // the reply answers what was there when it began
	var msgs []gpu.ChatMessage
	if c.p.remote != nil {
		msgs = append([]gpu.ChatMessage(nil), c.history...)
	}
	rp.g = rp.generatorFor(msgs)
	return nil
}

// promptOwnContext prefills the conversation for good, then the response's own instructions
// and tools declaration after a mark (rolled back afterwards), then the generation prompt.
func (rp *reply) promptOwnContext() error {
	c := rp.c
	rp.newResponse()
	rp.at = rp.historyLen()
	// The conversation so far goes in for good; only what follows the mark is this response's
	// alone.
	conv, err := c.syncHistory(rp.ts.ctx, false)
	if err != nil {
		return err
	}
	c.mu.Lock()
	hist := slices.Clone(c.history)
	fedBefore := c.fedText
	c.mu.Unlock()
	base := len(hist)
	hist = append(hist, rp.ownContext()...)
	// Nothing of this response's own precedes the reply (no instructions, the tools already
	// declared in the conversation): a reply without calls can stay in the sequence, as a
	// plain response's does, instead of being rolled back and read again next turn.
	plain := len(hist) == base
	if c.p.remote != nil {
		rp.g = rp.generatorFor(hist)
		rp.r.usage = &duplex.Usage{} // the remote's count, after generation
		rp.inSeq = false
		return nil
	}
	rp.undo = &undoPoint{mark: c.seq.Mark(), fedBefore: fedBefore, what: "a response's own context"}
	rp.inSeq = plain
	// The instructions first, then the generation prompt: the same appends (and so the same
	// tokens) as a system message added to the conversation before a response.
	instr, err := c.syncHistoryTo(rp.ts.ctx, hist, false)
	var st gpu.AppendStats
	if err == nil {
		st, err = c.syncHistoryTo(rp.ts.ctx, hist, true)
	}
	if err != nil {
		return err
	}
	// Every token this response prefilled is its turn's work (num_tokens_in).
	st.Tokens += conv.Tokens + instr.Tokens
	rp.r.prefill = st
	rp.r.usage = c.promptUsage(rp.ts.n, st.Tokens, c.seq)
	rp.g = c.seq
	return nil
}

// ownContext is what a ResponseSpec adds to the conversation for its reply alone: its
// instructions, and its tools' declaration unless the conversation has it.
func (rp *reply) ownContext() []gpu.ChatMessage {
	var own []gpu.ChatMessage
	if rp.spec.Instructions != nil {
		own = append(own, gpu.ChatMessage{Role: "system", Content: *rp.spec.Instructions})
	}
	if rp.spec.Tools.Parses() {
		if decl := rp.c.toolsDeclaration(rp.spec.Tools); decl != nil {
			own = append(own, *decl)
		}
	}
	return own
}

// promptInput prefills a ResponseSpec's own input into a sequence of its own.
func (rp *reply) promptInput() error {
	c := rp.c
	rp.newResponse()
	rp.at = rp.historyLen()
	rp.inSeq = false
	msgs := rp.specMessages(rp.spec)
	if c.p.remote != nil {
		rp.g = rp.generatorFor(msgs)
		rp.r.usage = &duplex.Usage{} // the remote's count, after generation
		return nil
	}
	seq, st, err := rp.openSpecSequence(rp.ts.ctx, msgs)
	if err != nil {
		return err
	}
	rp.own = seq
	rp.r.prefill = st
	// Its own sequence: nothing cached. Prefill jobs billed to the turn went into the
	// conversation's sequence, which this response does not read.
	rp.r.usage = c.promptUsage(rp.ts.n, st.Tokens, seq)
	rp.r.usage.CachedTokens = 0
	rp.g = seq
	return nil
}

// promptSpeculation prefills the provisional user message, reported as the endpoint's prefill
// job reports it, then the generation prompt: the same appends in the same chunks as without
// speculation, so the engine computes (and a greedy reply comes out) exactly the same.
func (rp *reply) promptSpeculation() error {
	c, ts := rp.c, rp.ts
	pre := time.Now()
	st, err := c.syncHistoryTo(ts.ctx, rp.hist, false)
	user := st.Tokens
	if err == nil && st.Tokens > 0 {
		_ = c.disp.stageMetrics(ts.ctx, ts, StageMetricsMessage{
			RequestID: c.rid, StageID: 0, Turn: ts.n, StageSubmitTS: st.SubmitTS, FinalOutputType: finalOutputType(c.opts.WantAudio),
			Metrics: metrics.StageRequestStats{
				BatchID: int(st.BatchID), BatchSize: st.BatchSize, NumTokensIn: st.Tokens,
				StageGenTimeMs: msSince(pre), OutputUnitType: "text",
			},
		})
	}
	rp.newResponse() // the response's own work starts after the user message's
	if err == nil {
		st, err = c.syncHistoryTo(ts.ctx, rp.hist, true)
	}
	if err != nil {
		return err
	}
	rp.r.prefill = st
	rp.r.usage = c.promptUsage(ts.n, user+st.Tokens, c.seq)
	rp.g = rp.generatorFor(rp.hist)
	return nil
}

// generateOptions are the reply's generation options: with tools, its output is parsed for
// calls, and a forced choice is decoded under the tools' grammar.
func (rp *reply) generateOptions() (gpu.GenerateOptions, error) {
	opts := gpu.GenerateOptions{MaxTokens: rp.maxTokens}
	sampling := rp.c.opts.Sampling
	if t := rp.spec.Temperature; t != nil {
		// This reply's own temperature; the stream's sampling stays for the next.
		sampling.Temperature = float32(*t)
		opts.Sampling = &sampling
	}
	tools := rp.spec.Tools
	if !tools.Parses() {
		return opts, nil
	}
	p := rp.c.p
	rp.r.tools = newToolParser(p.toolFormat(), tools.Parallel)
	if !tools.Forces() {
		return opts, nil
	}
	only := ""
	if tools.Choice == duplex.ToolChoiceFunction {
		only = tools.Function
	}
	gr, err := toolCallGrammar(p.toolFormat(), tools.Tools, only, rp.maxTokens-1, true, false)
	if err != nil {
		return opts, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	s := sampling
	s.Grammar = gr
	opts.Sampling = &s
	return opts, nil
}

func (rp *reply) historyLen() int {
	rp.c.mu.Lock()
	defer rp.c.mu.Unlock()
	return len(rp.c.history)
}

func (rp *reply) closeOwn() {
	if rp.own != nil {
		rp.own.Close()
	}
}

// verdict waits for a speculation's endpoint to decide it (true: confirmed; the stream
// closing discards it); any other reply stands.
func (rp *reply) verdict() bool {
	if rp.sp == nil {
		return true
	}
	select {
	case confirmed := <-rp.sp.verdict:
		return confirmed
	case <-rp.c.ctx.Done():
		return false
	}
}

// replyFate is what becomes of a reply: its text stays in the sequence as generated (kept),
// joins the history (joins), and the sequence goes back to the reply's undo point (undo).
type replyFate struct{ kept, joins, undo bool }

// fateOf decides a reply's fate. text is the reply with its calls; calls counts them;
// confirmed is the verdict (true but for a discarded speculation); generated is false when
// it failed before generating; stays is false when the turn was aborted without keepHistory.
func (rp *reply) fateOf(text string, calls int, confirmed, generated, stays bool) replyFate {
	var f replyFate
	f.joins = confirmed && generated && stays && text != "" && !rp.spec.OutOfBand
	f.kept = f.joins && rp.inSeq && calls == 0
	if rp.undo != nil {
		// A speculation is undone when discarded (confirmed, its turn stands as prefilled); a
		// response's own context whenever its reply does not stay.
		f.undo = !f.kept
		if rp.sp != nil {
			f.undo = !confirmed
		}
	}
	return f
}

// fold ends the reply: its text (with its tool calls in the model's own markup, so that the
// results that follow answer something the model can see) joins the conversation where it
// began, the sequence keeps or rolls back what the reply put there.
func (rp *reply) fold(text string, generated bool) {
	c, ts := rp.c, rp.ts
	confirmed := rp.verdict()
	if confirmed && rp.sp != nil {
		rp.at = rp.sp.at
	}
	calls := 0
	if rp.r != nil && len(rp.r.calls) > 0 {
		calls = len(rp.r.calls)
		callsText := c.p.toolFormat().callsText(rp.r.calls)
		if strings.TrimSpace(text) != "" {
			callsText = text + "\n" + callsText
		}
		text = callsText
	}
	f := rp.fateOf(text, calls, confirmed, generated, !ts.aborted.Load() || ts.keep.Load())
	c.mu.Lock()
	c.gen = nil
	if f.undo {
		c.fedText = rp.undo.fedBefore
	}
	if f.kept {
		// In the sequence already, exactly as generated.
		c.fedText += text
	}
	if f.joins {
		// Not kept: the next sync prefills it.
		c.history = slices.Insert(c.history, min(rp.at, len(c.history)), gpu.ChatMessage{Role: "assistant", Content: text, Turn: ts.n})
	}
	c.mu.Unlock()
	if f.undo {
		rp.rollback()
	}
}

// rollback takes the stream's sequence back to the undo point's mark. Only the sequence
// goroutine touches the sequence, so nothing runs on it until the rollback is done.
func (rp *reply) rollback() {
	c, u := rp.c, rp.undo
	if c.seq == nil || c.ctx.Err() != nil {
		return
	}
	if err := c.seq.Rollback(c.ctx, u.mark); err != nil {
		// The sequence keeps the tokens; the next sync appends after them.
		c.p.log.Warn("rolling back "+u.what, zap.String("request_id", c.rid), zap.Error(err))
	}
}
