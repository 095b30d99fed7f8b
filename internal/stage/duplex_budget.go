package stage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
)

// The conversation's token budget (Options.Truncation): before a job puts the conversation into
// the sequence, fit checks that the sequence, with what the job adds and room for a reply, stays
// within the window, and when it would not, drops the oldest turns ("auto", retention_ratio) or
// refuses ("disabled"). A drop removes whole turns, down to the retention share of the budget,
// so that it comes once every many turns: between drops every job appends to a KV prefix that
// stays cached. The drop forgets the sequence's tokens after its pinned prefix (the
// instructions) and the next sync prefills the turns kept, once. The session learns which
// turns went (OutTruncated) and deletes their items.

// tokenBudget is one check of the budget: the sequence's window, the room a reply needs, the
// tokens of the pinned messages (instructions, tools declaration) and the setting.
type tokenBudget struct {
	window, reply, pinned int
	trunc                 duplex.Truncation
}

// maxReplyShare bounds the room kept for a reply to a quarter of the window: a reply limit
// near or past the window (max_output_tokens 4096 on a 2048-token window) must not leave the
// conversation nothing. A reply that outgrows its room ends at the window as before.
const maxReplyShare = 4

// newBudget is the budget of a window for a reply of up to reply tokens.
func newBudget(window, reply, pinned int, trunc duplex.Truncation) tokenBudget {
	return tokenBudget{window: window, reply: min(reply, window/maxReplyShare), pinned: pinned, trunc: trunc}
}

// limit is the most tokens the conversation after the pinned messages may hold: the window
// less the reply's room and the pinned messages, or retention_ratio's post_instructions
// when it is lower.
func (b tokenBudget) limit() int {
	l := b.window - b.reply - b.pinned
	if b.trunc.Mode == duplex.TruncationRetentionRatio && b.trunc.PostInstructions > 0 {
		l = min(l, b.trunc.PostInstructions)
	}
	return max(l, 0)
}

// target is what a drop brings the conversation down to: the retention share of the limit.
func (b tokenBudget) target() int {
	return int(b.trunc.Retention() * float64(b.limit()))
}

// overflow is the error of a conversation of conv tokens that cannot fit: the context
// window's figures, and why nothing was dropped.
func (b tokenBudget) overflow(conv int) error {
	cle := &ContextLengthError{PromptTokens: b.pinned + conv, CompletionTokens: b.reply, Limit: b.window}
	if b.trunc.Mode == duplex.TruncationDisabled {
		return fmt.Errorf("truncation is disabled and the conversation no longer fits (%d tokens after the instructions, at most %d): %w", conv, b.limit(), cle)
	}
	return fmt.Errorf("the newest turn alone does not fit (%d tokens after the instructions, at most %d): %w", conv, b.limit(), cle)
}

// dropPlan is fit's decision for a conversation over its limit: drop every droppable message
// of the turns up to through (0: nothing), leaving after tokens; or err.
type dropPlan struct {
	through int
	after   int
	err     error
}

// planDrop decides a drop for a conversation of conv tokens under b. turns are the droppable
// turns, oldest first, the newest (which is never dropped) excluded; convAfter(i) is the
// conversation's tokens once turns[:i+1] are dropped (non-increasing in i). It drops the
// fewest turns that bring the conversation to the target, or failing that the most that
// bring it within the limit.
func planDrop(b tokenBudget, conv int, turns []int, convAfter func(i int) (int, error)) dropPlan {
	if conv <= b.limit() {
		return dropPlan{after: conv}
	}
	if b.trunc.Mode == duplex.TruncationDisabled || len(turns) == 0 {
		return dropPlan{after: conv, err: b.overflow(conv)}
	}
	var ferr error
	after := func(i int) int {
		n, err := convAfter(i)
		if err != nil && ferr == nil {
			ferr = err
		}
		return n
	}
	target := b.target()
	i := sort.Search(len(turns), func(i int) bool { return after(i) <= target })
	if i == len(turns) {
		i = len(turns) - 1 // the target is out of reach: as close as the newest turn allows
	}
	n := after(i)
	switch {
	case ferr != nil:
		return dropPlan{after: conv, err: ferr}
	case n > b.limit():
		return dropPlan{after: n, err: b.overflow(n)}
	}
	return dropPlan{through: turns[i], after: n}
}

// droppable reports whether truncation may drop m: a message of a turn, not a system message
// (the instructions, their later updates, the tools declaration stay).
func droppable(m gpu.ChatMessage) bool { return m.Turn > 0 && m.Role != "system" }

// dropTurns is hist without the droppable messages of turns up to through.
func dropTurns(hist []gpu.ChatMessage, through int) []gpu.ChatMessage {
	return slices.DeleteFunc(slices.Clone(hist), func(m gpu.ChatMessage) bool { return droppable(m) && m.Turn <= through })
}

// turnsOf is the distinct turns of hist's droppable messages, oldest first, without the
// newest message's turn.
func turnsOf(hist []gpu.ChatMessage) []int {
	if len(hist) == 0 {
		return nil
	}
	newest := hist[len(hist)-1].Turn
	var turns []int
	for _, m := range hist {
		if droppable(m) && m.Turn < newest {
			turns = append(turns, m.Turn)
		}
	}
	slices.Sort(turns)
	return slices.Compact(turns)
}

// pinnedPrefix is the start of the sequence that holds the pinned messages alone (the
// instructions prefilled at open): a drop keeps those tokens cached.
type pinnedPrefix struct {
	tok  int    // sequence positions [0, tok)
	text string // their rendering: fedText began with it when it was taken
}

// tokenKeeper keeps a conversation within its token budget (fit): it holds what it learnt of
// the sequence, the pinned prefix. Its own type, beside the conversation's, so that the
// conversation stays one concern: the keeper reads it and drops from it. Sequence goroutine.
type tokenKeeper struct {
	pinned pinnedPrefix
}

// notePinned records the pinned prefix after a sync of hist (without the generation prompt)
// left the sequence holding want (histLen tokens), when hist is pinned messages only.
func (k *tokenKeeper) notePinned(hist []gpu.ChatMessage, want string, addGen bool, histLen int) {
	if addGen || len(hist) == 0 || slices.ContainsFunc(hist, droppable) {
		return
	}
	k.pinned = pinnedPrefix{tok: histLen, text: want}
}

// kept is the pinned prefix a drop may keep: while fed (the conversation's fedText) still
// begins with it and the sequence (histLen tokens) still holds it (a rollback of the tools
// declaration may have gone below it), else nothing.
func (k *tokenKeeper) kept(fed string, histLen int) pinnedPrefix {
	p := k.pinned
	if p.text == "" || !strings.HasPrefix(fed, p.text) || p.tok > histLen {
		return pinnedPrefix{}
	}
	return p
}

// fit keeps the conversation within its token budget before a job puts it into the sequence:
// reply is the room the next reply needs, extra what the job adds beyond the history (a
// speculation's user message). It returns the error of a conversation that cannot fit (a
// *ContextLengthError in its chain): with truncation disabled, or when the newest turn alone
// is too long. Sequence goroutine; a remote thinker counts its own context.
func (k *tokenKeeper) fit(c *conversation, turn, reply int, extra []gpu.ChatMessage) error {
	if c.seq == nil || c.opts.TranscribeOnly {
		return nil
	}
	eng := c.p.deps.Engine
	c.mu.Lock()
	hist := append(slices.Clone(c.history), extra...)
	fed, trunc := c.fedText, c.opts.Truncation
	c.mu.Unlock()
	pinned, err := pinnedTokens(eng, hist)
	if err != nil {
		return err
	}
	now, err := tokensAfterSync(eng, c.seq.HistoryLen(), hist, fed)
	if err != nil {
		return err
	}
	b := newBudget(eng.Info().SeqContext, reply, pinned, trunc)
	turns := turnsOf(hist)
	plan := planDrop(b, now-pinned, turns, func(i int) (int, error) {
		n, err := renderTokens(eng, dropTurns(hist, turns[i]), true)
		return n - pinned, err
	})
	if plan.err != nil || plan.through == 0 {
		return plan.err
	}
	return k.drop(c, turn, plan, now-pinned)
}

// drop forgets the sequence after its kept prefix, drops the turns up to plan.through from the
// history (the next sync prefills what is kept) and reports it (OutTruncated) as turn's.
func (k *tokenKeeper) drop(c *conversation, turn int, plan dropPlan, before int) error {
	c.mu.Lock()
	keep := k.kept(c.fedText, c.seq.HistoryLen())
	kept := dropTurns(c.history, plan.through)
	c.mu.Unlock()
	if keep.text != "" && (c.decl.fed != "" || !rendersAfter(c.p.deps.Engine, kept, keep.text)) {
		// The kept prefix stays only when the conversation without the dropped turns still
		// renders after it (a template that folds the instructions into the first user turn
		// does not), and when no tools declaration is in the sequence: the forget loses the
		// declaration's mark, which a later change of tools rolls back to, so the declaration
		// goes in again (applyTools) with a fresh mark. Else everything is prefilled again.
		keep = pinnedPrefix{}
	}
	if err := c.seq.Forget(c.ctx, keep.tok, c.seq.HistoryLen()); err != nil {
		return fmt.Errorf("dropping the oldest turns: %w", err)
	}
	c.mu.Lock()
	n := len(c.history)
	c.history = dropTurns(c.history, plan.through)
	dropped := n - len(c.history)
	c.fedText = keep.text
	c.mu.Unlock()
	c.decl.fed = "" // forgotten with the rest: applyTools declares it again in its place

	c.p.log.Debug("conversation truncated", zap.String("request_id", c.rid), zap.Int("through_turn", plan.through),
		zap.Int("messages", dropped), zap.Int("tokens_before", before), zap.Int("tokens_after", plan.after), zap.Int("kept_prefix", keep.tok))
	tr := &duplex.Truncated{Through: plan.through, Messages: dropped, TokensBefore: before, TokensAfter: plan.after}
	return c.disp.output(c.ctx, nil, OutputMessage{Output: duplex.Output{Kind: duplex.OutTruncated, Turn: turn, Truncated: tr}, RequestID: c.rid, StageID: 0})
}

// rendersAfter reports whether hist renders (without the generation prompt) after prefix.
func rendersAfter(eng *gpu.Runner, hist []gpu.ChatMessage, prefix string) bool {
	text, err := eng.ChatPrompt(hist, false)
	return err == nil && strings.HasPrefix(text, prefix)
}

// pinnedTokens is the tokens of hist's system messages rendered alone, the part of the window
// truncation never frees.
func pinnedTokens(eng *gpu.Runner, hist []gpu.ChatMessage) (int, error) {
	pinned := slices.DeleteFunc(slices.Clone(hist), droppable)
	if len(pinned) == 0 {
		return 0, nil
	}
	return renderTokens(eng, pinned, false)
}

// renderTokens is the tokens of hist's rendering as a sequence's first append.
func renderTokens(eng *gpu.Runner, hist []gpu.ChatMessage, addGen bool) (int, error) {
	text, err := eng.ChatPrompt(hist, addGen)
	if err != nil {
		return 0, fmt.Errorf("rendering conversation: %w: %w", ErrTemplate, err)
	}
	n, _, err := eng.CountTokens(text, 0)
	if err != nil {
		return 0, fmt.Errorf("counting conversation tokens: %w", err)
	}
	return n, nil
}

// tokensAfterSync is the sequence's length once hist, with the generation prompt, is synced
// onto it (histLen tokens now; fed is what it holds, as syncHistoryTo renders it).
func tokensAfterSync(eng *gpu.Runner, histLen int, hist []gpu.ChatMessage, fed string) (int, error) {
	want, err := eng.ChatPrompt(hist, true)
	if err != nil {
		return 0, fmt.Errorf("rendering conversation: %w: %w", ErrTemplate, err)
	}
	delta, ok := strings.CutPrefix(want, fed)
	if !ok && len(hist) > 0 {
		if delta, err = eng.ChatPrompt(hist[len(hist)-1:], true); err != nil {
			return 0, fmt.Errorf("rendering conversation: %w: %w", ErrTemplate, err)
		}
	}
	toks, err := eng.Tokenize(delta)
	if err != nil {
		return 0, fmt.Errorf("counting conversation tokens: %w", err)
	}
	return histLen + len(toks), nil
}

// fitJob keeps the conversation within its token budget before job j (conversation.fit); a
// failure to count is logged and the job runs as before.
func (d *DuplexStream) fitJob(j seqJob) error {
	c := d.conv
	reply, turn, extra := c.opts.MaxTokens, j.turn, []gpu.ChatMessage(nil)
	switch {
	case j.settle || j.eot != nil:
		return nil
	case j.ts != nil:
		if j.rspec != nil && j.rspec.Input != nil {
			return nil // a response's own input reads a sequence of its own
		}
		turn = j.ts.n
		if j.maxTokens > 0 {
			reply = j.maxTokens
		}
		if j.spec != nil {
			extra = []gpu.ChatMessage{{Role: "user", Content: j.spec.transcript, Turn: j.ts.n}}
		}
	}
	err := c.keeper.fit(c, turn, reply, extra)
	if err != nil && !errBudget(err) {
		if c.ctx.Err() == nil {
			c.p.log.Warn("checking the conversation's token budget", zap.String("request_id", c.rid), zap.Error(err))
		}
		return nil
	}
	return err
}

// errBudget reports whether err is the budget's refusal (a context-length error), which ends a
// job without running it, as opposed to a failure to count.
func errBudget(err error) bool { return errors.Is(err, ErrContextLength) }

// SetTruncation changes the stream's truncation setting (DuplexOptions.Truncation) from its
// next job on; the conversation is checked against it before that job.
func (d *DuplexStream) SetTruncation(ctx context.Context, t duplex.Truncation) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("setting truncation: %w: %w", ErrInvalidRequest, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("setting truncation: %w", err)
	}
	c := d.conv
	c.mu.Lock()
	defer c.mu.Unlock()
	c.opts.Truncation = t
	return nil
}
