package stage

import (
	"errors"
	"fmt"
	"github.com/omniserve/omniserve/internal/duplex"
	"slices"

	"go.uber.org/zap"

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
func (d *DuplexStream) SetTools(spec *duplex.ToolSpec) error { return d.conv.setTools(spec) }

// setTools is SetTools.
func (c *conversation) setTools(spec *duplex.ToolSpec) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	want := ""
	if spec.Parses() {
		t := *spec
		c.tools = &t
		want = c.p.toolFormat().toolsInstructions(t.Tools)
	} else {
		c.tools = nil
	}
	if want == c.decl.want {
		return nil
	}
	if c.isClosed() {
		return fmt.Errorf("setting tools: %w", ErrClosed)
	}
	c.decl.want = want
	c.dropSpecLocked("tools changed")
	if c.decl.have == "" {
		// A first declaration joins the history now, in order with the messages around it;
		// a change or a removal is made by the sequence goroutine where the old one is.
		c.history = append(c.history, gpu.ChatMessage{Role: "system", Content: want})
		c.decl.have = want
	}
	// The prefill is the current input's work, as a message added now would be.
	select {
	case c.jobs <- seqJob{turn: c.ids.input}:
	default:
		// The queue is full: the next prefill or response job applies the tools first.
	}
	return nil
}

// toolSpec is the stream's tools (nil: none).
func (c *conversation) toolSpec() *duplex.ToolSpec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tools
}

// toolsDeclaration is the system message a response with tools t reads after the conversation,
// or nil when the conversation already declares them (SetTools).
func (c *conversation) toolsDeclaration(t *duplex.ToolSpec) *gpu.ChatMessage {
	decl := c.p.toolFormat().toolsInstructions(t.Tools)
	c.mu.Lock()
	defer c.mu.Unlock()
	if declIndex(c.history, decl) >= 0 {
		return nil
	}
	return &gpu.ChatMessage{Role: "system", Content: decl}
}

// declIndex is the index of the declaration decl in hist (-1: not there).
func declIndex(hist []gpu.ChatMessage, decl string) int {
	if decl == "" {
		return -1
	}
	return slices.IndexFunc(hist, func(m gpu.ChatMessage) bool { return m.Role == "system" && m.Content == decl })
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
func (c *conversation) applyTools(turn int) {
	c.mu.Lock()
	want, have := c.decl.want, c.decl.have
	c.mu.Unlock()
	if want == have && (c.seq == nil || c.decl.fed == have) {
		return
	}
	if c.seq == nil || c.decl.fed == "" {
		c.declareTools(turn, want)
		return
	}
	c.redeclareTools(turn, want)
}

// declareTools is applyTools when nothing of the tools is in the sequence yet (or there is no
// sequence): the declaration takes its place in the history, and is prefilled after a mark.
func (c *conversation) declareTools(turn int, want string) {
	c.mu.Lock()
	c.history, _ = c.decl.replace(c.history, want, true)
	c.mu.Unlock()
	if c.seq == nil || want == "" {
		return // a remote thinker reads the history with each response
	}
	c.mu.Lock()
	before := slices.Clone(c.history[:max(declIndex(c.history, want), 0)])
	c.mu.Unlock()
	// What precedes the declaration goes in first, so that the mark is where it starts.
	if err := c.prefillHistory(turn, before); err != nil {
		return // reported; the next job tries again
	}
	c.decl.mark, c.decl.fed = c.seq.Mark(), want
	_ = c.prefill(turn) // reported by prefill
}

// redeclareTools is applyTools when the sequence holds the old declaration (have, = fed) from
// the mark on: it is rolled back there, and the new one and what followed are prefilled again.
func (c *conversation) redeclareTools(turn int, want string) {
	// The input added since goes in first, as the sequence knows the conversation.
	if err := c.prefill(turn); err != nil {
		return
	}
	err := c.seq.Rollback(c.ctx, c.decl.mark)
	switch {
	case err == nil || c.ctx.Err() != nil:
	case errors.Is(err, gpu.ErrMarkLost):
		// Expected in a long conversation: the truncation that lost the mark dropped the
		// oldest tokens, the declaration's too when it came early in the conversation.
		c.p.log.Debug("tools changed after a truncation; the new declaration follows the conversation", zap.String("request_id", c.rid))
	default:
		c.p.log.Warn("the old tools declaration may stay in the sequence", zap.String("request_id", c.rid), zap.Error(err))
	}
	c.mu.Lock()
	var at int
	c.history, at = c.decl.replace(c.history, want, err == nil)
	held := slices.Clone(c.history[:at]) // what the sequence holds now, as rendered
	c.mu.Unlock()
	text := ""
	if len(held) > 0 {
		var rerr error
		if text, rerr = c.p.deps.Engine.ChatPrompt(held, false); rerr != nil {
			c.p.log.Warn("rendering the conversation before the tools declaration", zap.String("request_id", c.rid), zap.Error(rerr))
		}
	}
	c.mu.Lock()
	c.fedText = text
	c.mu.Unlock()
	c.decl.mark, c.decl.fed = c.seq.Mark(), want
	_ = c.prefill(turn) // the new declaration and, after a rollback, the conversation after it
}

// replace puts the declaration want in hist in place of the one there (have; "" removes it):
// where the old one was when inPlace or when there was none to move from, else after the
// conversation. It returns the new history and the index the sequence is in step with up to,
// once rolled back (inPlace: where the old one began) or not (everything but the new one).
func (t *toolsDecl) replace(hist []gpu.ChatMessage, want string, inPlace bool) ([]gpu.ChatMessage, int) {
	at := len(hist)
	if i := declIndex(hist, t.have); i >= 0 {
		hist = slices.Delete(hist, i, i+1)
		at = len(hist)
		if inPlace {
			at = i
		}
	}
	if want != "" {
		hist = slices.Insert(hist, at, gpu.ChatMessage{Role: "system", Content: want})
	}
	t.have = want
	return hist, at
}
