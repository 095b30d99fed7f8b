package stage

import (
	"context"
	"fmt"
	"github.com/omniserve/omniserve/internal/duplex"
	"strings"

	"github.com/omniserve/omniserve/internal/gpu"
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
	ts, err := d.conv.startResponse(turn, spec.MaxTokens, &spec)
	if err != nil {
		return 0, err
	}
	return ts.n, nil
}

// specMessages is the context of a response with its own input: its instructions (or the
// stream's) as the system prompt, then the input.
func (rp *reply) specMessages(spec duplex.ResponseSpec) []gpu.ChatMessage {
	c := rp.c
	sys := c.opts.Instructions
	if spec.Instructions != nil {
		sys = *spec.Instructions
	}
	var msgs []gpu.ChatMessage
	if spec.Tools.Parses() {
		sys = strings.TrimSpace(sys + "\n\n" + c.p.toolFormat().toolsInstructions(spec.Tools.Tools))
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
func (rp *reply) openSpecSequence(ctx context.Context, msgs []gpu.ChatMessage) (*gpu.Sequence, gpu.AppendStats, error) {
	c := rp.c
	eng := c.p.deps.Engine
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
	seq, err := eng.Open(ctx, gpu.SeqOptions{Sampling: c.opts.Sampling})
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
