package stage

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
)

// CheckInstructions refuses a system prompt that cannot fit a duplex stream's context window
// with room for at least one generated token (a *ContextLengthError), before a session accepts
// it: prefilling a longer one would run the whole text through the sequence's truncating
// window, at the cost of every token, and still leave no room to answer. A remote thinker
// counts its own context, so nothing is checked here for it.
func (p *Pipeline) CheckInstructions(text string) error {
	if p.remote != nil || text == "" {
		return nil
	}
	prompt, err := p.deps.Engine.ChatPrompt([]gpu.ChatMessage{{Role: "system", Content: text}}, true)
	if err != nil {
		return fmt.Errorf("rendering instructions: %w", err)
	}
	limit := p.deps.Engine.Info().SeqContext
	n, over, err := p.deps.Engine.CountTokens(prompt, limit)
	if err != nil {
		return fmt.Errorf("counting instruction tokens: %w", err)
	}
	if over || n >= limit {
		return &ContextLengthError{PromptTokens: n, Limit: limit}
	}
	return nil
}

// MaxInputBytesPerToken is what one token of a duplex input may stand for on average before the
// input is refused by its size alone, unread by the tokenizer: far above real text (English
// runs at about 4 bytes a token, CJK at 3 bytes a character), so that only a text that could
// not fit the window anyway is refused so. Tokenizing is cheap per byte but not free: a 10 MiB
// string alone cost seconds of CPU, all of it for an input that is then refused.
const MaxInputBytesPerToken = 16

// ErrInputTooLong reports an input refused by its size alone (InputTooLongError has the figures).
var ErrInputTooLong = errors.New("stage: input too long")

// InputTooLongError is an input of Bytes bytes refused before it was tokenized: more than
// Limit, the window's tokens times MaxInputBytesPerToken.
type InputTooLongError struct {
	Bytes, Limit int
}

func (e *InputTooLongError) Error() string {
	return fmt.Sprintf("the input is %d bytes, more than the %d this model's context window can hold", e.Bytes, e.Limit)
}

// Is makes errors.Is(err, ErrInputTooLong) true.
func (e *InputTooLongError) Is(target error) bool { return target == ErrInputTooLong }

// InputWindow is the tokens a duplex stream's sequence holds: the window MeasureInput measures
// against (0: the thinker is remote and counts its own context).
func (p *Pipeline) InputWindow() int {
	if p.remote != nil || p.deps.Engine == nil {
		return 0
	}
	return p.deps.Engine.Info().SeqContext
}

// MeasureInput is the tokens a message of role (as DuplexStream.AppendText takes it) adds to a
// duplex conversation, rendered as the sequence holds it, so that a session can refuse input
// before it queues it for a prefill. A text over the window's byte bound is refused unread
// (*InputTooLongError); one whose tokens alone exceed the window, with the count
// (*ContextLengthError). A remote thinker counts its own context: 0, nil.
func (p *Pipeline) MeasureInput(role, text string) (int, error) {
	window := p.InputWindow()
	if window == 0 {
		return 0, nil
	}
	if limit := window * MaxInputBytesPerToken; len(text) > limit {
		return 0, &InputTooLongError{Bytes: len(text), Limit: limit}
	}
	role, text, err := inputMessage(p.toolFormat(), role, text)
	if err != nil {
		return 0, err
	}
	prompt, err := p.deps.Engine.ChatPrompt([]gpu.ChatMessage{{Role: role, Content: text}}, false)
	if err != nil {
		return 0, fmt.Errorf("rendering input: %w: %w", ErrTemplate, err)
	}
	n, over, err := p.deps.Engine.CountTokens(prompt, window)
	if err != nil {
		return 0, fmt.Errorf("counting input tokens: %w", err)
	}
	if over {
		return n, &ContextLengthError{PromptTokens: n, Limit: window}
	}
	return n, nil
}

// MeasureTools is MeasureInput of the system message that declares tools to the model
// (SetTools): a declaration is prefilled like any input, and stays in the window.
func (p *Pipeline) MeasureTools(tools []duplex.Tool) (int, error) {
	if p.InputWindow() == 0 || len(tools) == 0 {
		return 0, nil
	}
	// The declaration is at least the tools' own JSON: a list far over the byte bound is
	// refused before it is rendered.
	size := 0
	for _, t := range tools {
		size += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	if limit := p.InputWindow() * MaxInputBytesPerToken; size > limit {
		return 0, &InputTooLongError{Bytes: size, Limit: limit}
	}
	return p.MeasureInput("system", p.toolFormat().toolsInstructions(tools))
}

// inputMessage is the role and text of the message AppendText adds for role and text: a tool
// call restored as the assistant's, a function's result in its template family's wrapping (tf).
func inputMessage(tf toolFormat, role, text string) (string, string, error) {
	if role == duplex.RoleToolCall {
		var c duplex.ToolCall
		if err := json.Unmarshal([]byte(text), &c); err != nil {
			return "", "", fmt.Errorf("appending a tool call: %w: %v", ErrInvalidRequest, err)
		}
		role, text = "assistant", tf.callsText([]duplex.ToolCall{c})
	}
	if err := validRole(role); err != nil {
		return "", "", err
	}
	if role == "tool" {
		// A function's result (it may be empty), in the role and wrapping the chat template's
		// family gives it.
		role, text = tf.resultMessage("", text)
	}
	if strings.TrimSpace(text) == "" {
		return "", "", fmt.Errorf("appending text: %w", audio.ErrEmptyText)
	}
	return role, text, nil
}
