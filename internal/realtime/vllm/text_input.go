package vllm

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// The open input item's text. vllm-omni's input.text.append joins the text to the input item
// being built (its Session.append_text) and nothing is answered; the commit (input.commit,
// input_audio_buffer.commit) or a response.create makes the joined text, trimmed, one user
// message, and input_audio_buffer.clear, input.cancel and barge_in drop it (its
// cancel_pending_input). Here the text waits in the translator and becomes one user item of the
// conversation just before what the commit does with the audio.
//
// The text is taken when the command is applied, not when it is decoded (a connection's first
// frame is decoded more than once): both commands answer themselves (the connection's
// selfAnswered), on the connection's reader, in wire order.

// maxOpenText bounds the open input item's text.
const maxOpenText = 1 << 20

// textAppended is input.text.append: text joins the open input item.
type textAppended struct {
	session.Base
	t    *Translator
	text string
}

// Answer joins the text; nothing is sent, and the session learns only of the client's activity
// (vllm-omni's append marks user input activity: the idle timeout starts again).
func (a *textAppended) Answer() ([]protocol.ServerEvent, []session.Command) {
	a.t.mu.Lock()
	defer a.t.mu.Unlock()
	a.t.openText.WriteString(a.text)
	return nil, []session.Command{&session.InputActivity{Base: a.Base}}
}

// withText is a commit or response.create that takes the open input item's text along: the
// text as a user item, then inner (nil: the item alone).
type withText struct {
	session.Base
	t     *Translator
	inner session.Command
}

// Answer takes the open text and gives the commands: its user item first, then inner.
func (w *withText) Answer() ([]protocol.ServerEvent, []session.Command) {
	text := w.t.takeText()
	var cmds []session.Command
	if text != "" {
		cmds = append(cmds, &session.CreateItem{Base: session.Base{ID: w.ID, Kind: "input.text.append"}, Role: "user", Text: text})
	}
	if w.inner != nil {
		cmds = append(cmds, w.inner)
	}
	return nil, cmds
}

// responseCreate is response.create (responseOptions), taking the open input item's text
// along when there is any.
func (t *Translator) responseCreate(raw map[string]json.RawMessage, b session.Base) (session.Command, *protocol.Error) {
	cmd, werr := responseOptions(raw, b)
	if werr != nil || !t.pendingText() {
		return cmd, werr
	}
	return &withText{Base: b, t: t, inner: cmd}, nil
}

// textAppend decodes input.text.append (and its aliases).
func (t *Translator) textAppend(raw map[string]json.RawMessage, base session.Base) (session.Command, *protocol.Error) {
	var text string
	if v, ok := raw["text"]; !ok || json.Unmarshal(v, &text) != nil {
		return nil, &protocol.Error{Code: "bad_event", Param: "text", EventID: base.ID, Message: base.Kind + " requires text (a string)"}
	}
	t.mu.Lock()
	size := t.openText.Len()
	t.mu.Unlock()
	if size+len(text) > maxOpenText {
		return nil, &protocol.Error{Code: "invalid_value", Param: "text", EventID: base.ID,
			Message: fmt.Sprintf("the open input item's text would exceed %d bytes: commit it first", maxOpenText)}
	}
	return &textAppended{Base: base, t: t, text: text}, nil
}

// pendingText reports whether the open input item holds text (trimmed, as it will be taken).
func (t *Translator) pendingText() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(t.openText.String()) != ""
}

// takeText empties the open input item's text and returns it, trimmed.
func (t *Translator) takeText() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	text := strings.TrimSpace(t.openText.String())
	t.openText.Reset()
	return text
}
