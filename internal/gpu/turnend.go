package gpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
)

// UserTurnEnd is how the model's chat template closes a user message: Markup is the rendered
// text that follows a user message's content (marked as ChatPrompt marks it, e.g.
// "<|im_end|>\n" for ChatML, "\n" for the dummy models' plain format), Token the first token
// of it (ChatML's <|im_end|>). The probability the model gives Token right after a user's
// partial words is its own estimate that the user's turn is over (the approach of LiveKit's
// turn detector, which reads the same probability from a small model).
type UserTurnEnd struct {
	Markup string
	Token  int
}

// userTurnProbe is the content of the user message UserTurnEnd renders; its words end the
// content so that the markup after it is the template's, not a trimmed part of the message.
const userTurnProbe = "where is the station"

// UserTurnEnd returns the template's end-of-user-turn markup and token.
func (r *Runner) UserTurnEnd() (UserTurnEnd, error) {
	r.turnEndOnce.Do(func() {
		r.turnEnd, r.turnEndErr = r.findUserTurnEnd()
	})
	return r.turnEnd, r.turnEndErr
}

func (r *Runner) findUserTurnEnd() (UserTurnEnd, error) {
	prompt, err := r.ChatPrompt([]ChatMessage{{Role: "user", Content: userTurnProbe}}, false)
	if err != nil {
		return UserTurnEnd{}, fmt.Errorf("end of user turn: %w", err)
	}
	i := strings.LastIndex(prompt, userTurnProbe)
	if i < 0 {
		return UserTurnEnd{}, errors.New("end of user turn: the chat template does not keep a user message's words")
	}
	markup := prompt[i+len(userTurnProbe):]
	toks, err := r.Tokenize(markup)
	if err != nil {
		return UserTurnEnd{}, fmt.Errorf("end of user turn: %w", err)
	}
	if len(toks) == 0 {
		return UserTurnEnd{}, errors.New("end of user turn: the chat template closes a user message with nothing")
	}
	return UserTurnEnd{Markup: markup, Token: toks[0]}, nil
}

// scoreJob is a NextTokenProb call on the scheduler.
type scoreJob struct {
	tokens []int
	token  int
	res    chan scoreResult // cap 1
}

type scoreResult struct {
	p   float64
	err error
}

// NextTokenProb returns the probability the model gives token right after the sequence's
// history followed by text (tokenized as AppendText does), and leaves the sequence as it was:
// the history, its pending tokens and the KV cache are what they were before the call (the
// evaluated positions are removed from the cache again). It fails with ErrBusy while the
// sequence generates, and with ErrContextFull when text does not fit in the sequence's window
// (nothing is truncated for a score).
func (s *Sequence) NextTokenProb(ctx context.Context, text string, token int) (float64, error) {
	if token < 0 || token >= s.r.vocab {
		return 0, fmt.Errorf("next token probability: %w: token %d outside vocabulary of %d", ErrInvalidToken, token, s.r.vocab)
	}
	toks, err := s.r.Tokenize(text)
	if err != nil {
		return 0, fmt.Errorf("next token probability: %w", err)
	}
	if err := s.begin(); err != nil {
		return 0, fmt.Errorf("next token probability: %w", err)
	}
	job := &scoreJob{tokens: toks, token: token, res: make(chan scoreResult, 1)}
	if !s.r.enqueue(op{kind: opScore, seq: s, score: job}) {
		return 0, fmt.Errorf("next token probability: %w", ErrClosed)
	}
	select {
	case r := <-job.res:
		if r.err != nil {
			return 0, fmt.Errorf("next token probability: %w", r.err)
		}
		return r.p, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("next token probability: %w", ctx.Err())
	}
}

// applyScore runs on the scheduler between steps: it decodes the sequence's pending tokens and
// the job's at the positions after the history, in batches of its own, reads the last
// position's logits, and removes those positions from the KV cache again. The sequence's
// history and pending list are not touched, so a prefill in progress or the next step goes on
// exactly as without the score.
func (r *Runner) applyScore(s *Sequence, j *scoreJob) {
	switch {
	case s.schedClosed:
		j.res <- scoreResult{err: ErrClosed}
		return
	case s.active != nil:
		j.res <- scoreResult{err: ErrBusy}
		return
	}
	toks := append(append([]int(nil), s.pending...), j.tokens...)
	if r.addBOS && len(s.history) == 0 && len(s.pending) == 0 && (len(toks) == 0 || toks[0] != r.bos) {
		toks = append([]int{r.bos}, toks...)
	}
	h := len(s.history)
	switch {
	case len(toks) == 0:
		j.res <- scoreResult{err: ErrEmptyHistory}
		return
	case h+len(toks) > s.opts.MaxContext:
		j.res <- scoreResult{err: fmt.Errorf("%w: %d + %d tokens > limit %d", ErrContextFull, h, len(toks), s.opts.MaxContext)}
		return
	}
	defer r.lctx.KvCacheSeqRm(s.slot, h, -1)
	last := 0
	for off := 0; off < len(toks); off += r.cfg.BatchSize {
		n := min(r.cfg.BatchSize, len(toks)-off)
		r.batch.Clear()
		for i := range n {
			r.batch.Add(toks[off+i], nil, h+off+i, off+i == len(toks)-1, s.slot)
		}
		if err := r.lctx.Decode(r.batch); err != nil {
			j.res <- scoreResult{err: fmt.Errorf("decoding: %w", err)}
			return
		}
		last = n - 1
	}
	j.res <- scoreResult{p: softmaxAt(r.lctx.GetLogitsIth(last), j.token)}
}

// softmaxAt is the probability of token under the distribution of one logits row.
func softmaxAt(logits []float32, token int) float64 {
	if token < 0 || token >= len(logits) {
		return 0
	}
	peak := math.Inf(-1)
	for _, l := range logits {
		peak = max(peak, float64(l))
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l) - peak)
	}
	if sum == 0 || math.IsInf(peak, 0) || math.IsNaN(sum) {
		return 0
	}
	return math.Exp(float64(logits[token])-peak) / sum
}
