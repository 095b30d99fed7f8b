package stage

import (
	"context"
	"fmt"
	"strings"

	"github.com/omniserve/omniserve/internal/gpu"
)

// ResponseSpec is a response with per-response options beyond its length (OpenAI's
// response.create instructions, input and conversation "none").
type ResponseSpec struct {
	MaxTokens int // 0 = the stream's
	// Instructions, when set, are this response's own instructions. Over the conversation they
	// join the prompt as a system message after it, for this response only (the session's
	// instructions stay at its head: the conversation's KV cache is reused, not re-read); with
	// Input they are the system prompt instead of the session's.
	Instructions *string
	// Input, when non-nil, replaces the conversation as the response's context (empty: the
	// instructions alone). It is prefilled into a sequence of its own, freed after the reply.
	Input []gpu.ChatMessage
	// OutOfBand keeps the reply out of the conversation (conversation "none").
	OutOfBand bool
	// Tools, when set, are the functions this reply may call (the session's tools or the
	// response's own): declared to the model for this reply only, a forced choice decoded
	// under the tools' grammar, calls parsed from the output (ToolCalled outputs, never Text
	// and never spoken), and the calls kept in the conversation in the model's own markup.
	Tools *ToolSpec
}

// RespondWith starts the response of turn with per-response options and returns the id it
// runs under, as Respond does; it queues behind a running response as Respond does.
func (d *DuplexStream) RespondWith(ctx context.Context, turn int, spec ResponseSpec) (int, error) {
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
func (rp *reply) specMessages(spec ResponseSpec) []gpu.ChatMessage {
	c := rp.c
	sys := c.opts.Instructions
	if spec.Instructions != nil {
		sys = *spec.Instructions
	}
	var msgs []gpu.ChatMessage
	if spec.Tools.parses() {
		sys = strings.TrimSpace(sys + "\n\n" + c.p.toolFormat().toolsInstructions(spec.Tools.Tools))
	}
	if sys != "" {
		msgs = append(msgs, gpu.ChatMessage{Role: "system", Content: sys})
	}
	return append(msgs, spec.Input...)
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
