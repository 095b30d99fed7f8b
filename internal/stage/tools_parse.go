package stage

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/omniserve/omniserve/internal/duplex"
)

// toolParser splits a reply's text stream into content and tool calls in a family's markup, as
// it arrives: content is released as soon as it cannot be the start of a call (a possible
// opener's prefix is held back), call markup never is. A call's text that does not parse as a
// call is content after all (llama.cpp's parsers do the same), so nothing is dropped silently.
type toolParser struct {
	f        toolFormat
	parallel bool
	buf      string // text not yet released: a possible opener, or a call's body
	inCall   bool   // buf is a call's body (after its opener)
	opener   string // the opener of the call in buf (given back as content when it fails)
	sawText  bool   // llama3: a non-space character came before any call, so the reply is content
	ended    bool   // no parallel calls: the first call ended the reply's calls
	after    bool   // just after a call: white space before the next one is markup, not content
	calls    int
}

func newToolParser(f toolFormat, parallel bool) *toolParser {
	return &toolParser{f: f, parallel: parallel}
}

// feed takes the next text of the reply and returns the content it releases and the calls it
// completes.
func (p *toolParser) feed(text string) (content string, calls []duplex.ToolCall) {
	if p.ended {
		return "", nil
	}
	p.buf += text
	var out strings.Builder
	for !p.ended {
		if p.inCall {
			body, rest, complete := p.callEnd(p.buf)
			if !complete {
				break
			}
			cs, ok := p.parseCalls(body)
			if !ok {
				out.WriteString(p.opener + body)
			}
			calls = append(calls, cs...)
			p.inCall, p.buf, p.after = false, rest, ok
			continue
		}
		if p.after {
			p.buf = strings.TrimLeft(p.buf, " \t\r\n")
			if p.buf == "" {
				break
			}
			p.after = false
		}
		at, open, found := p.findOpener(p.buf)
		if !found {
			keep := p.holdBack(p.buf)
			out.WriteString(p.buf[:len(p.buf)-keep])
			if strings.TrimSpace(p.buf[:len(p.buf)-keep]) != "" {
				p.sawText = true
			}
			p.buf = p.buf[len(p.buf)-keep:]
			break
		}
		if strings.TrimSpace(p.buf[:at]) != "" {
			p.sawText = true
		}
		out.WriteString(p.buf[:at])
		p.inCall, p.opener, p.buf = true, open, p.buf[at+len(open):]
	}
	return out.String(), calls
}

// end is the end of the reply: held-back text is content, and a call whose closing markup never
// came (Qwen often ends at EOS after the JSON) counts when its body parses.
func (p *toolParser) end() (content string, calls []duplex.ToolCall) {
	if p.ended {
		return "", nil
	}
	rest := p.buf
	p.buf = ""
	if !p.inCall {
		return rest, nil
	}
	p.inCall = false
	cs, ok := p.parseCalls(rest)
	if !ok {
		return p.opener + rest, nil
	}
	return "", cs
}

// findOpener finds the first call opener in s.
func (p *toolParser) findOpener(s string) (at int, opener string, found bool) {
	switch p.f {
	case toolFormatHermes:
		if i := strings.Index(s, hermesOpen); i >= 0 {
			return i, hermesOpen, true
		}
	case toolFormatMistral:
		if i := strings.Index(s, mistralOpen); i >= 0 {
			return i, mistralOpen, true
		}
	case toolFormatLlama3:
		if i := strings.Index(s, llamaTag); i >= 0 {
			return i, llamaTag, true
		}
		// A bare JSON object that opens the reply is a call (llama.cpp's Llama 3.x handler);
		// the brace stays in the body.
		if !p.sawText && p.calls == 0 {
			if t := strings.TrimLeft(s, " \t\r\n"); strings.HasPrefix(t, "{") {
				return 0, "", true // the leading space is the body's
			}
		}
	}
	return -1, "", false
}

// holdBack is how many trailing bytes of s may still become an opener.
func (p *toolParser) holdBack(s string) int {
	opener := hermesOpen
	switch p.f {
	case toolFormatMistral:
		opener = mistralOpen
	case toolFormatLlama3:
		if !p.sawText && p.calls == 0 && strings.TrimLeft(s, " \t\r\n") == "" {
			return len(s) // leading space: the reply may still open with a call
		}
		opener = llamaTag
	}
	for n := min(len(opener)-1, len(s)); n > 0; n-- {
		if strings.HasSuffix(s, opener[:n]) {
			return n
		}
	}
	return 0
}

// callEnd finds the end of the call body at the start of s: Hermes' closing tag, or the end of
// the JSON value (Mistral's array, Llama's object and any further "; {...}" objects).
func (p *toolParser) callEnd(s string) (body, rest string, complete bool) {
	if p.f == toolFormatHermes {
		i := strings.Index(s, hermesClose)
		if i < 0 {
			return "", "", false
		}
		return s[:i], strings.TrimPrefix(s[i+len(hermesClose):], "\n"), true
	}
	n := jsonEnd(s)
	switch {
	case n == -2:
		return s, "", true // not JSON: the parse fails and it is content
	case n < 0:
		return "", "", false
	}
	if p.f == toolFormatLlama3 {
		// Several calls: {...}; {...}
		for {
			t := strings.TrimLeft(s[n:], " \t\r\n")
			if t == "" {
				return "", "", false // a "; {...}" may follow; end() takes what there is
			}
			if !strings.HasPrefix(t, ";") {
				break
			}
			t2 := strings.TrimLeft(t[1:], " \t\r\n")
			if t2 == "" {
				return "", "", false
			}
			m := jsonEnd(t2)
			if m == -1 {
				return "", "", false
			}
			if m < 0 {
				break
			}
			n = len(s) - len(t2) + m
		}
	}
	return s[:n], s[n:], true
}

// parseCalls parses a call body: one object (Hermes), an array (Mistral) or ';'-separated
// objects (Llama 3.x). ok is false when it is not a call.
func (p *toolParser) parseCalls(body string) ([]duplex.ToolCall, bool) {
	body = strings.TrimSpace(body)
	var raws []json.RawMessage
	switch {
	case strings.HasPrefix(body, "["):
		if err := json.Unmarshal([]byte(body), &raws); err != nil || len(raws) == 0 {
			return nil, false
		}
	case p.f == toolFormatLlama3:
		for _, part := range splitJSONObjects(body) {
			raws = append(raws, json.RawMessage(part))
		}
	default:
		raws = []json.RawMessage{json.RawMessage(body)}
	}
	var calls []duplex.ToolCall
	for _, r := range raws {
		c, ok := parseCall(r)
		if !ok {
			return nil, false
		}
		if p.ended {
			break // no parallel calls: the first one is the reply's call
		}
		c.Index, c.ID = p.calls, newToolCallID()
		p.calls++
		calls = append(calls, c)
		if !p.parallel {
			p.ended = true
		}
	}
	return calls, len(calls) > 0
}

// parseCall reads {"name": ..., "arguments"|"parameters": {...} or "<json>"}.
func parseCall(raw json.RawMessage) (duplex.ToolCall, bool) {
	var v struct {
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal(raw, &v); err != nil || v.Name == "" {
		return duplex.ToolCall{}, false
	}
	args := v.Arguments
	if len(args) == 0 {
		args = v.Parameters
	}
	var s string
	if json.Unmarshal(args, &s) == nil {
		args = json.RawMessage(s) // arguments given as a JSON string
	}
	if len(bytes.TrimSpace(args)) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, args); err != nil {
		return duplex.ToolCall{}, false
	}
	return duplex.ToolCall{Name: v.Name, Arguments: b.String()}, true
}

// splitJSONObjects splits "{...}; {...}" into its objects.
func splitJSONObjects(s string) []string {
	var out []string
	for {
		s = strings.TrimLeft(s, " \t\r\n;")
		if s == "" {
			return out
		}
		n := jsonEnd(s)
		if n < 0 {
			return append(out, s)
		}
		out = append(out, s[:n])
		s = s[n:]
	}
}

// jsonEnd returns the length of the JSON object or array that s starts with (after white
// space): -1 while it is incomplete, -2 when s does not start with one.
func jsonEnd(s string) int {
	i := len(s) - len(strings.TrimLeft(s, " \t\r\n"))
	if i == len(s) {
		return -1
	}
	if s[i] != '{' && s[i] != '[' {
		return -2
	}
	var sc jsonScan
	for ; i < len(s); i++ {
		if sc.step(s[i]) {
			return i + 1
		}
	}
	return -1
}

// jsonScan follows a JSON value's nesting byte by byte.
type jsonScan struct {
	depth      int
	inStr, esc bool
}

// step takes one byte; true once the outermost object or array closed.
func (j *jsonScan) step(c byte) bool {
	if j.inStr {
		switch {
		case j.esc:
			j.esc = false
		case c == '\\':
			j.esc = true
		case c == '"':
			j.inStr = false
		}
		return false
	}
	switch c {
	case '"':
		j.inStr = true
	case '{', '[':
		j.depth++
	case '}', ']':
		j.depth--
		return j.depth == 0
	}
	return false
}
