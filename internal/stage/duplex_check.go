package stage

import (
	"fmt"

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
