package gpu

import (
	"fmt"
	"strings"
)

const (
	chatFormatChatML = "chatml"
	chatFormatPlain  = "plain"
)

// chatFormatOf picks the prompt format for a GGUF chat template (see doc.go): ChatML when the
// template uses its markers, else the plain fallback. Templates are Jinja programs; matching
// the common format instead of running Jinja keeps the engine free of a template interpreter.
func chatFormatOf(tmpl string) string {
	if strings.Contains(tmpl, "<|im_start|>") && strings.Contains(tmpl, "<|im_end|>") {
		return chatFormatChatML
	}
	return chatFormatPlain
}

// ChatPrompt renders messages in the model's chat format. With addGenerationPrompt the prompt
// ends where the assistant's reply begins.
func (r *Runner) ChatPrompt(msgs []ChatMessage, addGenerationPrompt bool) (string, error) {
	var b strings.Builder
	for i, m := range msgs {
		role := strings.ToLower(strings.TrimSpace(m.Role))
		if role == "" {
			return "", fmt.Errorf("chat prompt: message %d has no role", i)
		}
		switch r.info.ChatFormat {
		case chatFormatChatML:
			fmt.Fprintf(&b, "<|im_start|>%s\n%s<|im_end|>\n", role, m.Content)
		default:
			fmt.Fprintf(&b, "%s: %s\n", role, m.Content)
		}
	}
	if addGenerationPrompt {
		if r.info.ChatFormat == chatFormatChatML {
			b.WriteString("<|im_start|>assistant\n")
		} else {
			b.WriteString("assistant:")
		}
	}
	return b.String(), nil
}
