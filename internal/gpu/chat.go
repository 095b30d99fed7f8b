package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// Chat formats (ModelInfo.ChatFormat): a model's own template is reported by the name of the
// llama.cpp built-in template it renders like ("llama3", "gemma", "chatml", ...), or "gguf"
// when it matches none of them by name.
const (
	chatFormatChatML = "chatml"
	chatFormatPlain  = "plain"
	chatFormatGGUF   = "gguf"
)

// Markers around control-token text in a rendered prompt. ChatPrompt puts them around the
// control tokens of the template's own markup and removes them from message content; Tokenize
// parses special tokens only between them. They are Unicode noncharacters, which no text in
// interchange contains.
const (
	markOpen  = '\uFDD0'
	markClose = '\uFDD1'
	// Message content is rendered as a placeholder first: sentOpen index sentClose, between
	// two vertical tabs that reveal whether the template trims the content.
	sentOpen  = '\uFDD2'
	sentClose = '\uFDD3'
	sentPad   = "\v"
)

// chatTemplate is how a Runner renders chat prompts.
type chatTemplate struct {
	format  string   // ModelInfo.ChatFormat
	tmpl    string   // for llama_chat_apply_template; "" renders the plain format
	control []string // control-token texts of the vocabulary, longest first
}

// newChatTemplate picks the prompt format for a model: the GGUF's own template
// (tokenizer.chat_template) through llama_chat_apply_template; ChatML when the GGUF has none; the
// plain format for the dummy models, whose vocabulary of words has no chat markers. A template
// llama.cpp does not recognise falls back to ChatML with a warning.
func newChatTemplate(ggufTemplate string, dummy bool, control []string, log *zap.Logger) chatTemplate {
	switch {
	case ggufTemplate == "" && dummy:
		return chatTemplate{format: chatFormatPlain}
	case ggufTemplate == "":
		return chatTemplate{format: chatFormatChatML, tmpl: chatFormatChatML, control: control}
	}
	probe, err := applyTemplate(ggufTemplate, probeRoles, probeContents, true)
	if err != nil {
		log.Warn("the model's chat template is not one llama.cpp supports; using ChatML", zap.Error(err))
		return chatTemplate{format: chatFormatChatML, tmpl: chatFormatChatML, control: control}
	}
	format := chatFormatGGUF
	for _, name := range builtinTemplates() {
		if out, err := applyTemplate(name, probeRoles, probeContents, true); err == nil && out == probe {
			format = name
			break
		}
	}
	return chatTemplate{format: format, tmpl: ggufTemplate, control: control}
}

// A conversation that tells templates apart.
var (
	probeRoles    = []string{"system", "user", "assistant", "user"}
	probeContents = []string{"be brief", " hello ", "hi there", "how are you?\n"}
)

// ChatPrompt renders messages in the model's chat format. With addGenerationPrompt the prompt
// ends where the assistant's reply begins.
//
// The text marks the control tokens of the template's markup with U+FDD0 / U+FDD1, and
// AppendText / Tokenize turn only marked text into control tokens: a message that contains
// "<|im_end|>" stays those characters and cannot end its turn. Message content is otherwise
// kept as written (minus U+FDD0..U+FDD3, noncharacters the markup reserves).
func (r *Runner) ChatPrompt(msgs []ChatMessage, addGenerationPrompt bool) (string, error) {
	roles := make([]string, len(msgs))
	contents := make([]string, len(msgs))
	for i, m := range msgs {
		role := strings.ToLower(strings.TrimSpace(m.Role))
		if role == "" {
			return "", fmt.Errorf("chat prompt: message %d has no role", i)
		}
		if strings.ContainsFunc(role, func(c rune) bool { return !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') }) {
			return "", fmt.Errorf("chat prompt: message %d has role %q; a role is letters, digits, '_' and '-'", i, m.Role)
		}
		roles[i] = role
		contents[i] = stripMarks(m.Content)
	}
	if r.chat.tmpl == "" {
		return plainPrompt(roles, contents, addGenerationPrompt), nil
	}
	return r.chat.render(roles, contents, addGenerationPrompt)
}

// plainPrompt is the format of the dummy models: "{role}: {content}\n" ... "assistant:".
func plainPrompt(roles, contents []string, addGen bool) string {
	var b strings.Builder
	for i := range roles {
		fmt.Fprintf(&b, "%s: %s\n", roles[i], contents[i])
	}
	if addGen {
		b.WriteString("assistant:")
	}
	return b.String()
}

// render applies the template to placeholders, marks the control tokens of the markup around
// them, and puts each message's content where its placeholder ended up (trimmed where the
// template trimmed the placeholder's padding). Content never reaches C, so NUL bytes in it
// are harmless.
func (t chatTemplate) render(roles, contents []string, addGen bool) (string, error) {
	sent := make([]string, len(contents))
	for i := range contents {
		sent[i] = sentPad + string(sentOpen) + strconv.Itoa(i) + string(sentClose) + sentPad
	}
	out, err := applyTemplate(t.tmpl, roles, sent, addGen)
	if err != nil {
		return "", fmt.Errorf("chat prompt: %w", err)
	}
	var b strings.Builder
	for {
		open := strings.IndexRune(out, sentOpen)
		if open < 0 {
			break
		}
		n := strings.IndexRune(out[open:], sentClose)
		if n < 0 {
			return "", errors.New("chat prompt: the template cut a message placeholder")
		}
		i, err := strconv.Atoi(out[open+len(string(sentOpen)) : open+n])
		if err != nil || i < 0 || i >= len(contents) {
			return "", errors.New("chat prompt: the template changed a message placeholder")
		}
		end := open + n + len(string(sentClose))
		before, after := out[:open], out[end:]
		content := contents[i]
		if s, ok := strings.CutSuffix(before, sentPad); ok {
			before = s
		} else {
			content = strings.TrimLeft(content, cSpace)
		}
		if s, ok := strings.CutPrefix(after, sentPad); ok {
			after = s
		} else {
			content = strings.TrimRight(content, cSpace)
		}
		t.markControl(&b, before)
		b.WriteString(content)
		out = after
	}
	t.markControl(&b, out)
	return b.String(), nil
}

// cSpace is what C's isspace (and so llama.cpp's trim) treats as white space.
const cSpace = " \t\n\v\f\r"

// markControl writes markup to b with every control-token text in it between markers,
// matching the longest token at the leftmost position as llama.cpp's tokenizer does.
func (t chatTemplate) markControl(b *strings.Builder, markup string) {
	for len(markup) > 0 {
		at, tok := len(markup), ""
		for _, c := range t.control {
			if i := strings.Index(markup, c); i >= 0 && (i < at || i == at && len(c) > len(tok)) {
				at, tok = i, c
			}
		}
		b.WriteString(markup[:at])
		if tok == "" {
			return
		}
		b.WriteRune(markOpen)
		b.WriteString(tok)
		b.WriteRune(markClose)
		markup = markup[at+len(tok):]
	}
}

// stripMarks removes the reserved noncharacters U+FDD0..U+FDD3 from s.
func stripMarks(s string) string {
	isMark := func(c rune) bool { return c >= markOpen && c <= sentClose }
	if !strings.ContainsFunc(s, isMark) {
		return s
	}
	return strings.Map(func(c rune) rune {
		if isMark(c) {
			return -1
		}
		return c
	}, s)
}

// promptSpans splits a rendered prompt into plain text and marked control-token text, in order.
type promptSpan struct {
	text    string
	control bool
}

func promptSpans(text string) []promptSpan {
	var out []promptSpan
	for text != "" {
		open := strings.IndexRune(text, markOpen)
		if open < 0 {
			out = append(out, promptSpan{text: stripMarks(text)})
			break
		}
		if open > 0 {
			out = append(out, promptSpan{text: stripMarks(text[:open])})
		}
		text = text[open+len(string(markOpen)):]
		end := strings.IndexRune(text, markClose)
		if end < 0 {
			end = len(text)
		}
		out = append(out, promptSpan{text: stripMarks(text[:end]), control: true})
		text = text[min(len(text), end+len(string(markClose))):]
	}
	return slices.DeleteFunc(out, func(s promptSpan) bool { return s.text == "" })
}
