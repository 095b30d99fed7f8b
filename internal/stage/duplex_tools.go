package stage

import (
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
)

// toolsDecl is the stream's own tools declaration in its conversation: a system message that
// SetTools asks for and the sequence goroutine keeps the sequence in step with (applyTools).
type toolsDecl struct {
	want string // the declaration the stream's tools need ("" none); guarded by mu
	have string // the declaration in the history ("" none); guarded by mu
	// fed is the declaration the sequence holds from mark on ("" none). Loop only.
	fed  string
	mark gpu.Mark
}

// SetTools sets the stream's own tools (a realtime session's session.tools and tool_choice).
// They are the tools of the responses the stream starts by itself at an endpoint or a
// responding commit (auto-response turns); Respond declares none and RespondWith's
// ResponseSpec.Tools decide for their response. nil or no tools: none. It takes effect for
// responses that start after it.
//
// Tools that may be called are declared once, as a system message in the conversation, so
// that the KV cache keeps the declaration: a response with these tools does not read it again
// (a declaration per response cost ~0.8 s of prefill per turn for three tools on the CPU
// dummy model). The declaration is prefilled at once, by a job queued now on the sequence
// goroutine (in order with the conversation's other jobs), not by the next response: the
// first turn after a session.update with tools reads only the user's input. Changed tools
// replace the declaration, and tools set to none remove it, from the history and from the
// sequence (applyTools), so that the model never sees a stale one.
func (d *DuplexStream) SetTools(spec *duplex.ToolSpec) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	want := ""
	if spec.Parses() {
		c := *spec
		d.tools = &c
		want = d.p.toolFormat().toolsInstructions(c.Tools)
	} else {
		d.tools = nil
	}
	if want == d.decl.want {
		return nil
	}
	if d.isClosed() {
		return fmt.Errorf("setting tools: %w", ErrClosed)
	}
	d.decl.want = want
	d.dropSpecLocked("tools changed")
	if d.decl.have == "" {
		// A first declaration joins the history now, in order with the messages around it;
		// a change or a removal is made by the sequence goroutine where the old one is.
		d.history = append(d.history, gpu.ChatMessage{Role: "system", Content: want})
		d.decl.have = want
	}
	// The prefill is the current input's work, as a message added now would be.
	select {
	case d.jobs <- seqJob{turn: d.input}:
	default:
		// The queue is full: the next prefill or response job applies the tools first.
	}
	return nil
}

// toolSpec is the stream's tools (nil: none).
func (d *DuplexStream) toolSpec() *duplex.ToolSpec {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.tools
}

// toolsDeclaration is the system message a response with tools t reads after the conversation,
// or nil when the conversation already declares them (SetTools).
func (d *DuplexStream) toolsDeclaration(t *duplex.ToolSpec) *gpu.ChatMessage {
	decl := d.p.toolFormat().toolsInstructions(t.Tools)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.declIndexLocked(decl) >= 0 {
		return nil
	}
	return &gpu.ChatMessage{Role: "system", Content: decl}
}

// declIndexLocked is the index of the declaration decl in the history (-1: not there).
func (d *DuplexStream) declIndexLocked(decl string) int {
	if decl == "" {
		return -1
	}
	return slices.IndexFunc(d.history, func(m gpu.ChatMessage) bool { return m.Role == "system" && m.Content == decl })
}

// applyTools brings the conversation's tools declaration, in the history and in the sequence,
// to what SetTools asked for, billing its prefill to turn. It runs on the sequence goroutine
// before a prefill or response job, so that no job holds an index into the history while the
// declaration changes.
//
// A first declaration is prefilled after what precedes it in the history, its start marked.
// A changed one takes the old one's place: the sequence is rolled back to that mark and the
// new declaration, then the messages that followed, are prefilled again (the model must not
// read tools it may no longer call); no tools remove it the same way. When the rollback is
// impossible (the context was truncated since, so the positions moved; the truncation
// dropped the oldest tokens, the old declaration's too when it came early) the new
// declaration goes after the conversation instead.
func (d *DuplexStream) applyTools(turn int) {
	d.mu.Lock()
	want, have := d.decl.want, d.decl.have
	d.mu.Unlock()
	if want == have && (d.seq == nil || d.decl.fed == have) {
		return
	}
	if d.seq == nil || d.decl.fed == "" {
		// Nothing of the tools in the sequence yet (or no sequence): only the history changes.
		d.mu.Lock()
		d.replaceDeclLocked(want, true)
		d.mu.Unlock()
		if d.seq == nil || want == "" {
			return // a remote thinker reads the history with each response
		}
		d.mu.Lock()
		before := slices.Clone(d.history[:max(d.declIndexLocked(want), 0)])
		d.mu.Unlock()
		// What precedes the declaration goes in first, so that the mark is where it starts.
		if err := d.prefillHistory(turn, before); err != nil {
			return // reported; the next job tries again
		}
		d.decl.mark, d.decl.fed = d.seq.Mark(), want
		_ = d.prefill(turn) // reported by prefill
		return
	}
	// The sequence holds the old declaration (have, = fed) from the mark on. The input added
	// since goes in first, as the sequence knows the conversation.
	if err := d.prefill(turn); err != nil {
		return
	}
	err := d.seq.Rollback(d.ctx, d.decl.mark)
	switch {
	case err == nil || d.ctx.Err() != nil:
	case errors.Is(err, gpu.ErrMarkLost):
		// Expected in a long conversation: the truncation that lost the mark dropped the
		// oldest tokens, the declaration's too when it came early in the conversation.
		d.p.log.Debug("tools changed after a truncation; the new declaration follows the conversation", zap.String("request_id", d.rid))
	default:
		d.p.log.Warn("the old tools declaration may stay in the sequence", zap.String("request_id", d.rid), zap.Error(err))
	}
	d.mu.Lock()
	at := d.replaceDeclLocked(want, err == nil)
	held := slices.Clone(d.history[:at]) // what the sequence holds now, as rendered
	d.mu.Unlock()
	text := ""
	if len(held) > 0 {
		var rerr error
		if text, rerr = d.p.deps.Engine.ChatPrompt(held, false); rerr != nil {
			d.p.log.Warn("rendering the conversation before the tools declaration", zap.String("request_id", d.rid), zap.Error(rerr))
		}
	}
	d.mu.Lock()
	d.fedText = text
	d.mu.Unlock()
	d.decl.mark, d.decl.fed = d.seq.Mark(), want
	_ = d.prefill(turn) // the new declaration and, after a rollback, the conversation after it
}

// replaceDeclLocked puts the declaration want in the history in place of the current one
// ("" removes it): where the old one was when inPlace or when there was none to move from,
// else after the conversation. It returns the index the sequence is in step with up to, once
// rolled back (inPlace: where the old one began) or not (everything but the new one).
func (d *DuplexStream) replaceDeclLocked(want string, inPlace bool) int {
	at := len(d.history)
	if i := d.declIndexLocked(d.decl.have); i >= 0 {
		d.history = slices.Delete(d.history, i, i+1)
		at = len(d.history)
		if inPlace {
			at = i
		}
	}
	if want != "" {
		d.history = slices.Insert(d.history, at, gpu.ChatMessage{Role: "system", Content: want})
	}
	d.decl.have = want
	return at
}
