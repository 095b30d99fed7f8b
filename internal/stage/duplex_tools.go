package stage

import "github.com/omniserve/omniserve/internal/gpu"

// SetTools sets the stream's own tools (a realtime session's session.tools and tool_choice).
// They are the tools of the responses the stream starts by itself at an endpoint or a
// responding commit (auto-response turns); Respond declares none and RespondWith's
// ResponseSpec.Tools decide for their response. nil or no tools: none. It takes effect for
// responses that start after it.
//
// Tools that may be called are declared once, as a system message joining the conversation
// (as changed instructions do), so that the KV cache keeps the declaration: a response with
// these tools does not read it again (a declaration per response cost ~0.8 s of prefill per
// turn for three tools on the CPU dummy model). Tools changed later are declared again.
func (d *DuplexStream) SetTools(spec *ToolSpec) error {
	d.mu.Lock()
	if !spec.parses() {
		d.tools = nil
		d.mu.Unlock()
		return nil
	}
	c := *spec
	d.tools = &c
	decl := d.p.toolFormat().toolsInstructions(c.Tools)
	declared := d.declaredLocked(decl)
	d.mu.Unlock()
	if declared {
		return nil
	}
	return d.addMessage(0, "system", decl)
}

// toolSpec is the stream's tools (nil: none).
func (d *DuplexStream) toolSpec() *ToolSpec {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.tools
}

// toolsDeclaration is the system message a response with tools t reads after the conversation,
// or nil when the conversation already declares them (SetTools).
func (d *DuplexStream) toolsDeclaration(t *ToolSpec) *gpu.ChatMessage {
	decl := d.p.toolFormat().toolsInstructions(t.Tools)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.declaredLocked(decl) {
		return nil
	}
	return &gpu.ChatMessage{Role: "system", Content: decl}
}

// declaredLocked reports whether the conversation holds the declaration decl (the history
// budget may have dropped it since SetTools added it).
func (d *DuplexStream) declaredLocked(decl string) bool {
	for _, m := range d.history {
		if m.Role == "system" && m.Content == decl {
			return true
		}
	}
	return false
}
