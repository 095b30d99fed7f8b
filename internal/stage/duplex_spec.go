package stage

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/metrics"
)

// RespondWith starts the response of turn with per-response options and returns the id it
// runs under, as Respond does; it queues behind a running response as Respond does.
func (d *DuplexStream) RespondWith(ctx context.Context, turn int, spec duplex.ResponseSpec) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("starting response: %w", err)
	}
	for _, m := range spec.Input {
		if err := validRole(m.Role); err != nil {
			return 0, err
		}
	}
	ts, err := d.startResponseSpec(turn, spec.MaxTokens, &spec)
	if err != nil {
		return 0, err
	}
	return ts.n, nil
}

// respondSpec is respond for a ResponseSpec: the reply is generated over the conversation plus
// the response's instructions (rolled back from the sequence afterwards), or over its own input
// in a sequence of its own; unless out of band it then joins the conversation as respond's does.
func (d *DuplexStream) respondSpec(ts *turnState, spec duplex.ResponseSpec) {
	p := d.p
	defer d.finishTurn(ts)
	if err := p.thinker.acquire(ts.ctx); err != nil {
		if d.opts.WantAudio {
			p.talker.unadmit()
		}
		return
	}
	defer p.thinker.release()
	maxTokens := spec.MaxTokens
	if maxTokens <= 0 {
		maxTokens = d.opts.MaxTokens
	}
	r := &response{rid: d.rid, ts: ts, disp: d.disp, wantAudio: d.opts.WantAudio, started: time.Now(), submitTS: metrics.Now()}
	fail := func(err error) {
		if d.opts.WantAudio {
			p.talker.unadmit()
		}
		if ts.ctx.Err() != nil || ts.aborted.Load() {
			p.abortMetrics(r, gpu.GenerateResult{})
			return
		}
		p.fail(r, 0, err)
	}
	d.mu.Lock()
	at := len(d.history)
	d.mu.Unlock()

	var (
		g        generator
		rollback func() // undoes the response's tokens in the stream's sequence
		plain    bool   // the sequence holds the conversation and the generation prompt only
	)
	switch {
	case spec.Input != nil:
		msgs := d.specMessages(spec)
		if p.remote != nil {
			g = remoteGen{t: p.remote, msgs: msgs, sampling: d.opts.Sampling}
			r.usage = &duplex.Usage{} // the remote's count, after generation
			break
		}
		seq, st, err := d.openSpecSequence(ts.ctx, msgs)
		if err != nil {
			fail(err)
			return
		}
		defer seq.Close()
		r.prefill = st
		// Its own sequence: nothing cached. Prefill jobs billed to the turn went into the
		// conversation's sequence, which this response does not read.
		r.usage = d.promptUsage(ts.n, st.Tokens, seq)
		r.usage.CachedTokens = 0
		g = seq
	default:
		// The conversation so far goes in for good; only what follows the mark is this
		// response's alone.
		conv, err := d.syncHistory(ts.ctx, false)
		if err != nil {
			fail(err)
			return
		}
		d.mu.Lock()
		hist := slices.Clone(d.history)
		fedBefore := d.fedText
		d.mu.Unlock()
		base := len(hist)
		if spec.Instructions != nil {
			hist = append(hist, gpu.ChatMessage{Role: "system", Content: *spec.Instructions})
		}
		if spec.Tools.Parses() {
			if decl := d.toolsDeclaration(spec.Tools); decl != nil {
				hist = append(hist, *decl)
			}
		}
		// Nothing of this response's own precedes the reply (no instructions, the tools already
		// declared in the conversation): a reply without calls can stay in the sequence, as a
		// plain response's does, instead of being rolled back and read again next turn.
		plain = len(hist) == base
		if p.remote != nil {
			g = remoteGen{t: p.remote, msgs: hist, sampling: d.opts.Sampling}
			r.usage = &duplex.Usage{} // the remote's count, after generation
			break
		}
		mark := d.seq.Mark()
		rollback = func() {
			d.mu.Lock()
			d.fedText = fedBefore
			d.mu.Unlock()
			if d.ctx.Err() != nil {
				return
			}
			// Only this goroutine touches the sequence, so nothing runs on it until the
			// rollback is done.
			if err := d.seq.Rollback(d.ctx, mark); err != nil {
				// The sequence keeps the response's tokens; the next sync appends after them.
				d.p.log.Warn("rolling back a response's own context", zap.String("request_id", d.rid), zap.Error(err))
			}
		}
		// The instructions first, then the generation prompt: the same appends (and so the
		// same tokens) as a system message added to the conversation before a response.
		instr, err := d.syncHistoryTo(ts.ctx, hist, false)
		var st gpu.AppendStats
		if err == nil {
			st, err = d.syncHistoryTo(ts.ctx, hist, true)
		}
		if err != nil {
			rollback()
			fail(err)
			return
		}
		// Every token this response prefilled is its turn's work (num_tokens_in).
		st.Tokens += conv.Tokens + instr.Tokens
		r.prefill = st
		r.usage = d.promptUsage(ts.n, st.Tokens, d.seq)
		g = d.seq
	}
	opts := gpu.GenerateOptions{MaxTokens: maxTokens}
	if spec.Tools.Parses() {
		r.tools = newToolParser(p.toolFormat(), spec.Tools.Parallel)
		if spec.Tools.Forces() {
			only := ""
			if spec.Tools.Choice == duplex.ToolChoiceFunction {
				only = spec.Tools.Function
			}
			gr, err := toolCallGrammar(p.toolFormat(), spec.Tools.Tools, only, maxTokens-1, true, false)
			if err != nil {
				if rollback != nil {
					rollback()
				}
				fail(fmt.Errorf("%w: %w", ErrInvalidRequest, err))
				return
			}
			s := d.opts.Sampling
			s.Grammar = gr
			opts.Sampling = &s
		}
	}
	d.mu.Lock()
	d.gen = ts
	d.mu.Unlock()
	text, _, _ := p.generate(r, g, opts)
	kept := plain && rollback != nil && !spec.OutOfBand && len(r.calls) == 0 && text != "" && (!ts.aborted.Load() || ts.keep.Load())
	if rollback != nil && !kept {
		rollback()
	}
	d.mu.Lock()
	d.gen = nil
	if kept {
		// In the sequence already, exactly as generated (a plain response's bookkeeping).
		d.fedText += text
	}
	if len(r.calls) > 0 {
		// The calls stay in the conversation as the model writes them, so the tool results
		// that follow answer something the model can see.
		calls := p.toolFormat().callsText(r.calls)
		if strings.TrimSpace(text) != "" {
			calls = text + "\n" + calls
		}
		text = calls
	}
	if !spec.OutOfBand && text != "" && (!ts.aborted.Load() || ts.keep.Load()) {
		// Not in the sequence (rolled back, or generated elsewhere): the next sync prefills it.
		d.history = slices.Insert(d.history, min(at, len(d.history)), gpu.ChatMessage{Role: "assistant", Content: text})
	}
	d.mu.Unlock()
}

// specMessages is the context of a response with its own input: its instructions (or the
// stream's) as the system prompt, then the input.
func (d *DuplexStream) specMessages(spec duplex.ResponseSpec) []gpu.ChatMessage {
	sys := d.opts.Instructions
	if spec.Instructions != nil {
		sys = *spec.Instructions
	}
	var msgs []gpu.ChatMessage
	if spec.Tools.Parses() {
		sys = strings.TrimSpace(sys + "\n\n" + d.p.toolFormat().toolsInstructions(spec.Tools.Tools))
	}
	if sys != "" {
		msgs = append(msgs, gpu.ChatMessage{Role: "system", Content: sys})
	}
	for _, m := range spec.Input {
		msgs = append(msgs, gpu.ChatMessage{Role: m.Role, Content: m.Text})
	}
	return msgs
}

// openSpecSequence prefills msgs with the generation prompt into a new sequence, refusing a
// prompt that cannot fit its context (ContextLengthError) before prefilling anything.
func (d *DuplexStream) openSpecSequence(ctx context.Context, msgs []gpu.ChatMessage) (*gpu.Sequence, gpu.AppendStats, error) {
	eng := d.p.deps.Engine
	prompt, err := eng.ChatPrompt(msgs, true)
	if err != nil {
		return nil, gpu.AppendStats{}, fmt.Errorf("rendering response input: %w: %w", ErrTemplate, err)
	}
	limit := eng.Info().SeqContext
	n, over, err := eng.CountTokens(prompt, limit)
	if err != nil {
		return nil, gpu.AppendStats{}, fmt.Errorf("counting response input tokens: %w", err)
	}
	if over || n >= limit {
		return nil, gpu.AppendStats{}, &ContextLengthError{PromptTokens: n, Limit: limit}
	}
	seq, err := eng.Open(ctx, gpu.SeqOptions{Sampling: d.opts.Sampling})
	if err != nil {
		return nil, gpu.AppendStats{}, fmt.Errorf("opening a sequence for the response input: %w", err)
	}
	// The messages, then the generation prompt: the same appends (and so the same tokens) as
	// a conversation of these messages gets before its response.
	body, err := eng.ChatPrompt(msgs, false)
	if err != nil {
		seq.Close()
		return nil, gpu.AppendStats{}, fmt.Errorf("rendering response input: %w: %w", ErrTemplate, err)
	}
	tail, ok := strings.CutPrefix(prompt, body)
	if !ok {
		body, tail = prompt, ""
	}
	var st gpu.AppendStats
	for _, part := range []string{body, tail} {
		if part == "" {
			continue
		}
		one, err := seq.AppendText(ctx, part)
		if err != nil {
			seq.Close()
			return nil, gpu.AppendStats{}, fmt.Errorf("prefilling response input: %w", err)
		}
		one.Tokens += st.Tokens
		st = one
	}
	return seq, st, nil
}
