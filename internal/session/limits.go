package session

import (
	"errors"
	"fmt"

	"github.com/omniserve/omniserve/internal/requestclient"
)

// defaultMaxInstructionsBytes is the default bound on session and per-response instructions
// (ManagerConfig.MaxInstructionsBytes): far above any real persona prompt, far below what it
// would cost to tokenize on every update.
const defaultMaxInstructionsBytes = 128 << 10

// errContextLength reports instructions (or a prompt) that cannot fit the model's context
// window; the engine's error, joined to it, says by how much.
var errContextLength = errors.New("context length exceeded")

// instructionsChecker is implemented by backends that can tell, before a session accepts
// them, whether instructions fit the model's context window (errContextLength when not).
type instructionsChecker interface {
	CheckInstructions(text string) error
}

// CheckInstructions implements instructionsChecker.
func (b *PipelineBackend) CheckInstructions(text string) error {
	err := b.client.CheckInstructions(text)
	if _, ok := requestclient.ContextLengthErrorOf(err); ok {
		return errors.Join(errContextLength, err)
	}
	return err
}

// checkInstructions validates instructions given as param (session.instructions or
// response.instructions): at most MaxInstructionsBytes (OpenAI's string_above_max_length),
// then within the model's context (context_length_exceeded), so that no turn ever has to
// prefill a prompt that cannot fit.
func checkInstructions(text, param string, limit int, backend Backend) *FieldError {
	if len(text) > limit {
		return &FieldError{"string_above_max_length", param, fmt.Sprintf(
			"Invalid '%s': string too long. Expected a string with maximum length %d, but got a string with length %d instead.",
			param, limit, len(text))}
	}
	ch, ok := backend.(instructionsChecker)
	if !ok || text == "" {
		return nil
	}
	err := ch.CheckInstructions(text)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errContextLength):
		msg := "the instructions do not fit the model's context window"
		if cle, ok := requestclient.ContextLengthErrorOf(err); ok {
			if cle.PromptTokens > 0 {
				msg = fmt.Sprintf("This model's maximum context length is %d tokens, and the instructions take %d tokens with the prompt around them. Please reduce the length of the instructions.", cle.Limit, cle.PromptTokens)
			} else {
				msg = fmt.Sprintf("This model's maximum context length is %d tokens, and the instructions are far longer. Please reduce the length of the instructions.", cle.Limit)
			}
		}
		return &FieldError{"context_length_exceeded", param, msg}
	default:
		return &FieldError{"server_error", param, fmt.Sprintf("checking the instructions: %v", err)}
	}
}
