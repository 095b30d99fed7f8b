package session

import (
	"fmt"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// Admission of engine input: every text that would be prefilled (a message item's text, a
// function call's arguments or output, the tools declaration, a response's own input) is
// measured in tokens before the session acknowledges it or queues it for the engine, against
// the model's context window and the session's prefill budget. Too much is refused with the
// error naming the parameter and never reaches the engine: issue 40's 4 MB user text item cost
// 148 s of prefill CPU for a prompt of 1,836 tokens, since the text was cut to the window only
// after the work. The stage's token keeper (truncation) still checks the whole conversation
// before each job; admission keeps a single input, and a burst of them, from costing more than
// the window they can never fit.

// inputMeter is implemented by backends that can measure engine input in tokens before a session
// queues it (the pipeline backend, through requestclient).
type inputMeter interface {
	// InputWindow is the model's context window in tokens (0: not measured here).
	InputWindow() int
	// MeasureInput is the tokens a message of role adds to the conversation.
	MeasureInput(role, text string) (int, error)
	// MeasureTools is the tokens of the declaration of tools.
	MeasureTools(tools []duplex.Tool) (int, error)
}

// InputWindow implements inputMeter.
func (b *PipelineBackend) InputWindow() int { return b.client.InputWindow() }

// MeasureInput implements inputMeter.
func (b *PipelineBackend) MeasureInput(role, text string) (int, error) {
	return b.client.MeasureInput(role, text)
}

// MeasureTools implements inputMeter.
func (b *PipelineBackend) MeasureTools(tools []duplex.Tool) (int, error) {
	return b.client.MeasureTools(tools)
}

// prefillBudget is a session's input admitted for the engine since its last response began
// (the input the next response prefills, or the engine is prefilling now); a response's start
// (beginTurn) and a new engine stream empty it. Its limit is ManagerConfig.PrefillBudgetTokens,
// or the room a reply leaves in the window.
type prefillBudget struct {
	pending int
}

// admitRule is what one admission check reads: the backend's meter (nil: nothing is measured),
// the configured budget (0: the window's room) and the reply's room the window must keep.
type admitRule struct {
	meter  inputMeter
	budget int
	reply  int // the session's max_output_tokens (0: the server's default)
}

// newAdmitRule is the admission rule of the server m for a session with configuration cfg.
func newAdmitRule(m *Manager, cfg Config) admitRule {
	meter, _ := m.backend.(inputMeter)
	reply := cfg.MaxOutputTokens
	if reply <= 0 {
		reply = m.cfg.DefaultMaxOutputTokens
	}
	return admitRule{meter: meter, budget: m.cfg.PrefillBudgetTokens, reply: reply}
}

// room is the tokens one response's input may take: the window less the reply's room, which is
// at most a quarter of the window (the token keeper's rule, internal/stage duplex_budget.go);
// 0 when nothing is measured.
func (r admitRule) room() int {
	if r.meter == nil {
		return 0
	}
	w := r.meter.InputWindow()
	if r.reply <= 0 || r.reply > w/4 {
		return w - w/4
	}
	return w - r.reply
}

// limit is the session's prefill budget: the configured one, or the window's room.
func (r admitRule) limit() int {
	if r.budget > 0 {
		return r.budget
	}
	return r.room()
}

// measureText measures a text given as param that will join the conversation as a message of
// role: refused (string_above_max_length, context_length_exceeded) when it alone cannot fit the
// window's room. It reads the backend only, so that a refused input costs no engine stream. A
// failure to measure admits the text (0 tokens): the engine counts again.
func measureText(r admitRule, param, role, text string) (int, *FieldError) {
	room := r.room()
	if room == 0 || text == "" {
		return 0, nil
	}
	n, err := r.meter.MeasureInput(role, text)
	if err != nil {
		return 0, measureError(err, param, room)
	}
	if n > room {
		return 0, tooManyTokens(param, n, room, "the input")
	}
	return n, nil
}

// take admits n more tokens of input given as param, refused (context_length_exceeded) when
// the input pending for the next response would go past the session's budget.
func (b *prefillBudget) take(r admitRule, param string, n int) *FieldError {
	if limit := r.limit(); n > 0 && b.pending+n > limit {
		return &FieldError{"context_length_exceeded", param, fmt.Sprintf(
			"The session's input since its last response would take %d tokens with this one (%d), more than the %d it may queue for the model (its prefill budget). Ask for a response first, or send less.",
			b.pending+n, n, limit)}
	}
	b.pending += n
	return nil
}

// admitTools measures the declaration of tools given as param (session.tools, response.tools):
// refused when it alone cannot fit the window's room. A declaration replaces the one before, so
// it takes none of the budget; the token keeper counts it with the conversation.
func admitTools(r admitRule, param string, tools []duplex.Tool) *FieldError {
	room := r.room()
	if room == 0 || len(tools) == 0 {
		return nil
	}
	n, err := r.meter.MeasureTools(tools)
	if err != nil {
		if _, ok := requestclient.InputTooLongErrorOf(err); ok {
			return &FieldError{"context_length_exceeded", param, fmt.Sprintf(
				"This model's maximum context length is %d tokens, and the declaration of these %d tools is far longer. Please declare fewer tools or shorten them.", r.meter.InputWindow(), len(tools))}
		}
		return measureError(err, param, room)
	}
	if n > room {
		return tooManyTokens(param, n, room, fmt.Sprintf("the declaration of these %d tools", len(tools)))
	}
	return nil
}

// admitPatchTools is admitTools of the tools a session.update sets (nil when it sets none).
func admitPatchTools(r admitRule, patch ConfigPatch) *FieldError {
	if !patch.ToolsSet {
		return nil
	}
	return admitTools(r, "session.tools", patch.Tools)
}

// measureError is the refusal of a measurement that failed with err: too long by its size or
// its tokens. nil for any other failure (an unknown role, a template that cannot render it):
// the engine refuses or counts the input when it comes, as before admission.
func measureError(err error, param string, room int) *FieldError {
	if err == nil {
		return nil
	}
	if e, ok := requestclient.InputTooLongErrorOf(err); ok {
		return &FieldError{"string_above_max_length", param, fmt.Sprintf(
			"Invalid '%s': string too long. Expected a string with maximum length %d, but got a string with length %d instead.",
			param, e.Limit, e.Bytes)}
	}
	if cle, ok := requestclient.ContextLengthErrorOf(err); ok {
		return tooManyTokens(param, cle.PromptTokens, room, "the input")
	}
	return nil // the engine refuses it, or counts it, when it comes, as before
}

// tooManyTokens is the context_length_exceeded refusal of what (param) taking n tokens (0: far
// more than counted) where room are available.
func tooManyTokens(param string, n, room int, what string) *FieldError {
	if n == 0 {
		return &FieldError{"context_length_exceeded", param, fmt.Sprintf(
			"At most %d tokens of input fit this model's context window with room for a reply, and %s is far longer. Please reduce its length.", room, what)}
	}
	return &FieldError{"context_length_exceeded", param, fmt.Sprintf(
		"At most %d tokens of input fit this model's context window with room for a reply, and %s takes %d tokens. Please reduce its length.", room, what, n)}
}

// textParam is the param naming a message item's text: its longest text part.
func textParam(c *CreateItem) string {
	return fmt.Sprintf("item.content[%d].text", c.TextIndex)
}

// admitResponseInput measures a response's own input (response.input), which the engine reads
// in a sequence of its own instead of the conversation: together it must fit the window's
// room; it takes none of the session's budget.
func admitResponseInput(r admitRule, input []duplex.Message) *FieldError {
	var b prefillBudget
	for _, m := range input {
		n, fe := measureText(r, "response.input", m.Role, m.Text)
		if fe == nil {
			fe = b.take(r, "response.input", n)
		}
		if fe != nil {
			return fe
		}
	}
	return nil
}
