package stage

import (
	"context"
	"fmt"

	"github.com/omniserve/omniserve/internal/gpu"
)

// SetTools sets the tools of the stream's responses (a realtime session's session.tools and
// tool_choice); nil or no tools: responses declare none. A response's own ResponseSpec.Tools
// replaces them for that response. It takes effect for responses that start after it.
func (d *DuplexStream) SetTools(spec *ToolSpec) error {
	if spec != nil && len(spec.Tools) > 0 && d.p.remote != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, &gpu.SamplingError{Param: "tools", Detail: "not supported with a remote thinker stage"})
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if spec == nil || len(spec.Tools) == 0 {
		d.tools = nil
		return nil
	}
	c := *spec
	d.tools = &c
	return nil
}

// toolSpec is the stream's tools (nil: none).
func (d *DuplexStream) toolSpec() *ToolSpec {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.tools
}

// AppendToolResult adds the result of the call named name to the conversation, as the chat
// template's family gives tool results back (a <tool_response> user turn for Hermes / Qwen,
// an ipython turn for Llama 3.x, [TOOL_RESULTS] for Mistral). The result names its function,
// so a call and its result stay paired even when other messages came between them.
func (d *DuplexStream) AppendToolResult(ctx context.Context, name, output string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("appending a tool result: %w", err)
	}
	role, text := d.p.toolFormat().resultMessage(name, output)
	return d.addMessage(role, text)
}

// responseTools is the tools a response runs with: its own, else the stream's; nil when it
// may call none.
func (d *DuplexStream) responseTools(spec *ResponseSpec) *ToolSpec {
	t := d.toolSpec()
	if spec != nil && spec.Tools != nil {
		t = spec.Tools
	}
	if !t.parses() {
		return nil
	}
	return t
}

// toolSampling is the sampling of a response with tools: the stream's, with a forced call's
// grammar bounded to maxTokens (the one token left is the end of generation).
func (d *DuplexStream) toolSampling(t *ToolSpec, maxTokens int) (*gpu.Sampling, error) {
	if !t.forced() {
		return nil, nil
	}
	only := ""
	if t.Choice == ToolChoiceFunction {
		only = t.Function
	}
	g, err := toolCallGrammar(d.p.toolFormat(), t.Tools, only, maxTokens-1, true, false)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	s := d.opts.Sampling
	s.Grammar = g
	return &s, nil
}

// withTools is msgs with the tools declared in a system message after them, the way a
// response's own instructions join the conversation: for this response only.
func (d *DuplexStream) withTools(msgs []gpu.ChatMessage, t *ToolSpec) []gpu.ChatMessage {
	if t == nil {
		return msgs
	}
	return append(msgs, gpu.ChatMessage{Role: "system", Content: d.p.toolFormat().toolsInstructions(t.Tools)})
}

// replyText is a reply as the conversation keeps it: its content, then its calls in the
// family's markup (the results the client sends back answer them).
func (d *DuplexStream) replyText(content string, calls []ToolCall) string {
	if len(calls) == 0 {
		return content
	}
	c := d.p.toolFormat().callsText(calls)
	if content != "" {
		return content + "\n" + c
	}
	return c
}
