package stage

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
)

// newToolCallID returns a fresh call id in OpenAI's call_ form.
func newToolCallID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "call_" + hex.EncodeToString(b)
}

// toolFormat is a chat-template family's tool-call markup: how the model is told about tools,
// how it writes a call, and how results are given back. The families are llama.cpp's native
// ones (common/chat.cpp): Hermes 2/3 and Qwen 2.5+ write <tool_call>{json}</tool_call>,
// Llama 3.x a bare {"name": ..., "parameters": ...} object (optionally after <|python_tag|>),
// Mistral [TOOL_CALLS] and a JSON array of calls.
type toolFormat int

const (
	toolFormatHermes toolFormat = iota
	toolFormatLlama3
	toolFormatMistral
)

func (f toolFormat) String() string {
	return [...]string{"hermes", "llama3", "mistral"}[f]
}

// toolFormatFor picks the family of a chat format (gpu.ModelInfo.ChatFormat). Hermes is the
// fallback, as it is Qwen's and ChatML's, and the dummy models' plain format speaks it too.
func toolFormatFor(chatFormat string) toolFormat {
	switch {
	case strings.HasPrefix(chatFormat, "llama3"), chatFormat == "llama4":
		return toolFormatLlama3
	case strings.HasPrefix(chatFormat, "mistral"):
		return toolFormatMistral
	}
	return toolFormatHermes
}

// Openers of a tool call in the model's output: the lazy grammar's triggers and the parser's
// cue that content ends.
const (
	hermesOpen  = "<tool_call>"
	hermesClose = "</tool_call>"
	llamaTag    = "<|python_tag|>"
	mistralOpen = "[TOOL_CALLS]"
)

// argsKey is the key of a call's arguments in the family's JSON.
func (f toolFormat) argsKey() string {
	if f == toolFormatLlama3 {
		return "parameters"
	}
	return "arguments"
}

// toolsInstructions is the system text that declares the tools in the family's own words: the
// signatures as JSON, and the markup a call takes.
func (f toolFormat) toolsInstructions(tools []duplex.Tool) string {
	var sigs strings.Builder
	for _, t := range tools {
		params := t.Parameters
		if len(params) == 0 {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		sig, _ := json.Marshal(struct {
			Type     string `json:"type"`
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description,omitempty"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		}{Type: "function", Function: struct {
			Name        string          `json:"name"`
			Description string          `json:"description,omitempty"`
			Parameters  json.RawMessage `json:"parameters"`
		}{t.Name, t.Description, params}})
		sigs.Write(sig)
		sigs.WriteByte('\n')
	}
	switch f {
	case toolFormatLlama3:
		return "You have access to the following functions. To call one, reply with only a JSON object " +
			`of the form {"name": function name, "parameters": object of argument names and values}.` +
			"\n\n" + sigs.String()
	case toolFormatMistral:
		return "[AVAILABLE_TOOLS][" + strings.TrimSuffix(strings.ReplaceAll(sigs.String(), "\n", ","), ",") + "][/AVAILABLE_TOOLS]\n" +
			`To call functions, reply with [TOOL_CALLS] followed by a JSON array of {"name": ..., "arguments": {...}} objects.`
	}
	return "# Tools\n\nYou may call one or more functions to help with the user's request. Their signatures are " +
		"inside <tools></tools>:\n<tools>\n" + sigs.String() + "</tools>\n\nFor each call, reply with a JSON object " +
		"naming the function and its arguments inside <tool_call></tool_call> tags:\n<tool_call>\n" +
		`{"name": <function-name>, "arguments": <args-json-object>}` + "\n</tool_call>"
}

// callsText is an assistant's earlier tool calls as the model writes them, for the prompt.
func (f toolFormat) callsText(calls []duplex.ToolCall) string {
	var b strings.Builder
	for i, c := range calls {
		args := strings.TrimSpace(c.Arguments)
		if args == "" || !json.Valid([]byte(args)) {
			a, _ := json.Marshal(c.Arguments) // not JSON: as a string, so the prompt stays well formed
			args = string(a)
		}
		name, _ := json.Marshal(c.Name)
		obj := fmt.Sprintf(`{"name": %s, %q: %s}`, name, f.argsKey(), args)
		switch f {
		case toolFormatHermes:
			if i > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(hermesOpen + "\n" + obj + "\n" + hermesClose)
		case toolFormatLlama3:
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString(obj)
		case toolFormatMistral:
			if i == 0 {
				b.WriteString(mistralOpen + "[")
			} else {
				b.WriteString(", ")
			}
			b.WriteString(obj)
			if i == len(calls)-1 {
				b.WriteByte(']')
			}
		}
	}
	return b.String()
}

// resultMessage is a tool's result as the family's templates give it back: Hermes and Qwen in a
// user turn between <tool_response> tags, Llama 3.x in an ipython turn, Mistral between
// [TOOL_RESULTS] markers in a user turn.
func (f toolFormat) resultMessage(name, content string) (role, text string) {
	switch f {
	case toolFormatLlama3:
		return "ipython", content
	case toolFormatMistral:
		c, _ := json.Marshal(map[string]string{"name": name, "content": content})
		return "user", "[TOOL_RESULTS]" + string(c) + "[/TOOL_RESULTS]"
	}
	return "user", "<tool_response>\n" + content + "\n</tool_response>"
}

// promptMessages are a chat's messages as the prompt shows them (texts: their text, audio
// parts transcribed): the tools' declaration joins the first system message (or opens the
// conversation), an assistant's calls follow its text in the family's markup, and a tool's
// result takes the family's role and wrapping.
func (f toolFormat) promptMessages(spec *duplex.ToolSpec, msgs []ChatMessage, texts []string) []gpu.ChatMessage {
	out := make([]gpu.ChatMessage, 0, len(msgs)+1)
	names := map[string]string{} // call id -> function name
	for i, m := range msgs {
		text := texts[i]
		switch {
		case m.Role == "tool":
			role, t := f.resultMessage(names[m.ToolCallID], text)
			out = append(out, gpu.ChatMessage{Role: role, Content: t})
			continue
		case len(m.ToolCalls) > 0:
			for _, c := range m.ToolCalls {
				names[c.ID] = c.Name
			}
			calls := f.callsText(m.ToolCalls)
			if strings.TrimSpace(text) != "" {
				calls = text + "\n" + calls
			}
			text = calls
		}
		out = append(out, gpu.ChatMessage{Role: m.Role, Content: text})
	}
	if spec == nil || len(spec.Tools) == 0 {
		return out
	}
	decl := f.toolsInstructions(spec.Tools)
	if len(out) > 0 && (out[0].Role == "system" || out[0].Role == "developer") {
		out[0].Content = strings.TrimRight(out[0].Content, "\n") + "\n\n" + decl
		return out
	}
	return append([]gpu.ChatMessage{{Role: "system", Content: decl}}, out...)
}

// CheckTools validates a tool spec before a request is built: every tool's schema must have a
// grammar, and a forced call one within maxTokens (one token is the end of generation).
func CheckTools(spec duplex.ToolSpec, maxTokens int) error {
	if spec.Forces() {
		only := ""
		if spec.Choice == duplex.ToolChoiceFunction {
			only = spec.Function
		}
		if _, err := toolCallGrammar(toolFormatHermes, spec.Tools, only, maxTokens-1, true, false); err != nil {
			return err
		}
	}
	for _, t := range spec.Tools {
		if _, err := toolCallGrammar(toolFormatHermes, []duplex.Tool{t}, "", math.MaxInt32, false, false); err != nil {
			return err
		}
	}
	return nil
}
