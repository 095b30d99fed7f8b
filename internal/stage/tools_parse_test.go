package stage

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
)

// scripted feeds a reply to a parser in the given pieces (as tokens would come) and returns the
// content it released, in order, and the calls.
func scripted(f toolFormat, parallel bool, pieces []string) (content string, calls []duplex.ToolCall) {
	p := newToolParser(f, parallel)
	var b strings.Builder
	for _, s := range pieces {
		c, cs := p.feed(s)
		b.WriteString(c)
		calls = append(calls, cs...)
	}
	c, cs := p.end()
	b.WriteString(c)
	return b.String(), append(calls, cs...)
}

// chars splits s into single-byte pieces: every opener and closer is cut at every position.
func chars(s string) []string {
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i : i+1]
	}
	return out
}

func TestToolParser(t *testing.T) {
	type call struct{ name, args string }
	tests := []struct {
		name     string
		f        toolFormat
		parallel bool
		text     string
		content  string
		calls    []call
	}{
		{name: "hermes content only", f: toolFormatHermes, text: "Hello <b>there</b>, no tools <tool", content: "Hello <b>there</b>, no tools <tool"},
		{name: "hermes one call", f: toolFormatHermes, text: "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
			content: "Let me check.\n", calls: []call{{"get_weather", `{"city":"Paris"}`}}},
		{name: "hermes call without closer at end", f: toolFormatHermes, text: "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}",
			calls: []call{{"f", `{}`}}},
		{name: "hermes arguments as a string", f: toolFormatHermes, text: "<tool_call>{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}</tool_call>",
			calls: []call{{"f", `{"a":1}`}}},
		{name: "hermes two calls parallel", f: toolFormatHermes, parallel: true,
			text:  "<tool_call>\n{\"name\":\"a\",\"arguments\":{\"x\":\"</tool\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"b\",\"arguments\":{}}\n</tool_call>",
			calls: []call{{"a", `{"x":"</tool"}`}, {"b", `{}`}}},
		{name: "hermes two calls, parallel off keeps the first", f: toolFormatHermes,
			text:  "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call><tool_call>{\"name\":\"b\",\"arguments\":{}}</tool_call>",
			calls: []call{{"a", `{}`}}},
		{name: "hermes malformed call is content", f: toolFormatHermes, text: "x <tool_call>not json</tool_call> y",
			content: "x <tool_call>not json y"},
		{name: "llama3 bare json", f: toolFormatLlama3, text: "  {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
			calls: []call{{"get_weather", `{"city":"Oslo"}`}}},
		{name: "llama3 python tag and two calls", f: toolFormatLlama3, parallel: true,
			text:  "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"k\": [1,2]}}",
			calls: []call{{"a", `{}`}, {"b", `{"k":[1,2]}`}}},
		{name: "llama3 text first is content", f: toolFormatLlama3, text: "Sure: {\"name\": \"a\"}", content: "Sure: {\"name\": \"a\"}"},
		{name: "llama3 json that is no call is content", f: toolFormatLlama3, text: "{\"answer\": 42} done", content: "{\"answer\": 42} done"},
		{name: "mistral", f: toolFormatMistral, parallel: true,
			text:    "ok [TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": \"]\"}}, {\"name\": \"b\", \"arguments\": {}}] tail",
			content: "ok tail", calls: []call{{"a", `{"q":"]"}`}, {"b", `{}`}}},
		{name: "mistral unfinished call is content", f: toolFormatMistral, text: "[TOOL_CALLS][{\"name\": \"a\", \"argu",
			content: "[TOOL_CALLS][{\"name\": \"a\", \"argu"},
	}
	for _, tt := range tests {
		for _, split := range []string{"whole", "chars"} {
			t.Run(tt.name+"/"+split, func(t *testing.T) {
				pieces := []string{tt.text}
				if split == "chars" {
					pieces = chars(tt.text)
				}
				content, calls := scripted(tt.f, tt.parallel, pieces)
				require.Equal(t, tt.content, content)
				require.Len(t, calls, len(tt.calls))
				for i, c := range calls {
					require.Equal(t, i, c.Index)
					require.Equal(t, tt.calls[i].name, c.Name)
					require.JSONEq(t, tt.calls[i].args, c.Arguments)
					require.Regexp(t, `^call_[0-9a-f]{24}$`, c.ID)
				}
			})
		}
	}
}

// TestToolParserNeverReleasesMarkup: however the stream is cut, no piece of a call's markup is
// released as content before the call is known.
func TestToolParserNeverReleasesMarkup(t *testing.T) {
	text := "Checking.<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":\"<tool_call>\"}}</tool_call>"
	for cut := 1; cut < len(text); cut++ {
		p := newToolParser(toolFormatHermes, true)
		c1, _ := p.feed(text[:cut])
		c2, calls := p.feed(text[cut:])
		c3, more := p.end()
		require.Equal(t, "Checking.", c1+c2+c3, "cut at %d", cut)
		require.Len(t, append(calls, more...), 1)
		require.NotContains(t, c1, "<", "cut at %d", cut)
	}
}
