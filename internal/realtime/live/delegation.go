package live

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// delegations is the session's delegated tasks: the test hook's pending one, the ids the client
// may answer, and the spoken acknowledgement waiting for its delay.
type delegations struct {
	armed   bool // the next user turn ends in a delegation (DelegateMarker, test hooks on)
	ids     []string
	ackDue  bool
	ackAtMs int64
	// suppress: the engine's own reply to the delegated turn is to be cancelled when it starts
	// (the delegation is the turn's answer); cancel is that reply's id, cancelled at the next
	// append.
	suppress bool
	cancel   string
	closeID  string // session.close's event id, echoed by session.closed
}

func (d *delegations) known(id string) bool { return slices.Contains(d.ids, id) }

// newID is a fresh id with prefix (api.openai.com's delegation ids are item_…).
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux
	return prefix + hex.EncodeToString(b[:])
}

// ackInstructions are the spoken acknowledgement's instructions.
const ackInstructions = "Tell the user in a few words that you are working on it."

// delegate ends the user's turn at offsetMs in a delegation (the test hook's scripted decision):
// session.delegation.created, and the spoken acknowledgement after acknowledgement_delay_ms;
// a Responses delegation's task fails at once when it needs a hosted tool omniserve cannot run.
func (t *Translator) delegate(offsetMs int64) []protocol.ServerEvent {
	t.deleg.armed = false
	d := Delegation{ID: newID("item_"), Type: "delegation", Target: t.cfg.delegation.Type}
	evs := []protocol.ServerEvent{}
	if d.Target == "responses" {
		d.ResponseID = newID("resp_")
		evs = append(evs, delegationCreated{Delegation: d, OffsetMs: offsetMs}, t.taskFailed(d.ResponseID, d.ID))
	} else {
		t.deleg.ids = append(t.deleg.ids, d.ID)
		evs = append(evs, delegationCreated{Delegation: d, OffsetMs: offsetMs})
	}
	delay := 0
	if t.cfg.delegation.AckDelayMs != nil {
		delay = *t.cfg.delegation.AckDelayMs
	}
	t.deleg.ackDue, t.deleg.ackAtMs = true, t.tl.ms()+int64(delay)
	if t.out.active && !t.out.activeOurs && t.out.activeID != "" {
		t.deleg.cancel = t.out.activeID // the engine's reply began before the session's VAD ended the turn
	} else {
		t.deleg.suppress = true
	}
	return evs
}

// hostedTools are the Responses delegation's tools omniserve cannot run (every type but
// function).
func (t *Translator) hostedTools() []string {
	var out []string
	if t.cfg.delegation.Responses == nil {
		return nil
	}
	for i, raw := range t.cfg.delegation.Responses.Tools {
		var tool struct {
			Type string `json:"type"`
		}
		if decodeStrict(raw, &tool, fmt.Sprint(i)) == nil && tool.Type != "function" {
			out = append(out, tool.Type)
		}
	}
	return out
}

// taskFailed is response.event carrying response.failed for a Responses task: omniserve runs no
// Responses backend, and names the hosted tools it could not have run.
func (t *Translator) taskFailed(responseID, delegationID string) protocol.ServerEvent {
	msg := "omniserve runs no Responses backend for delegated tasks yet (docs/LIVE.md)"
	code := "unsupported_backend"
	if hosted := t.hostedTools(); len(hosted) > 0 {
		code = "unsupported_tool"
		msg = fmt.Sprintf("the task needs hosted tools omniserve cannot run: %v (docs/LIVE.md)", hosted)
	}
	return responseEvent{DelegationID: delegationID, Event: map[string]any{
		"type": "response.failed",
		"response": map[string]any{"id": responseID, "object": "response", "status": "failed",
			"model": t.cfg.delegation.Responses.Model, "error": map[string]any{"code": code, "message": msg}},
	}}
}

// responsesCommand is response.create and response.item.create: Responses delegation only.
// omniserve runs no Responses backend yet: response.create's task fails as a task (the session
// goes on), and there is no task waiting for an item.
func (t *Translator) responsesCommand(ev clientEvent) (session.Command, *protocol.Error) {
	if t.cfg.delegation.Type != "responses" {
		return nil, &protocol.Error{Code: "invalid_value", Param: "type", EventID: ev.id, Message: ev.typ + " requires Responses delegation."}
	}
	if ev.typ == "response.item.create" {
		return nil, &protocol.Error{Code: "invalid_value", Param: "item", EventID: ev.id,
			Message: "No Responses task is waiting for an item: omniserve runs no Responses backend yet (docs/LIVE.md)."}
	}
	return &Reply{Base: ev.base(), Events: []protocol.ServerEvent{t.taskFailed(newID("resp_"), "")}}, nil
}

// dueCommands are the responses that are due now, at most one, while the user is silent and
// no reply plays: the delegation's spoken acknowledgement once its delay passed, else a
// commentary to say.
func (t *Translator) dueCommands() []session.Command {
	if id := t.deleg.cancel; id != "" {
		t.deleg.cancel = ""
		return []session.Command{&session.CancelResponse{Base: session.Base{ID: t.internalID("cancel"), Kind: "session.delegation.created"}, ResponseID: id}}
	}
	if t.in.speaking || t.out.active {
		return nil
	}
	var c *session.CreateResponse
	switch {
	case t.deleg.ackDue && t.tl.ms() >= t.deleg.ackAtMs:
		t.deleg.ackDue = false
		instr := ackInstructions
		n := ackTokens
		c = &session.CreateResponse{Base: session.Base{ID: t.internalID("ack"), Kind: "session.delegation.created"}, Instructions: &instr, MaxOutputTokens: &n}
	case len(t.commentary) > 0:
		t.asked, t.commentary = t.commentary[0], t.commentary[1:]
		n := t.asked
		c = &session.CreateResponse{Base: session.Base{ID: t.internalID("commentary"), Kind: "session.commentary.append"}, MaxOutputTokens: &n}
	default:
		return nil
	}
	t.out.active, t.out.ours = true, true // until its response.done (or its refusal) says otherwise
	return []session.Command{c}
}

// responseStarted notes a reply starting: the track is busy; the engine's own reply to a
// delegated turn is cancelled at the next append (ours are not: ours is the next to start
// after we asked).
func (t *Translator) responseStarted(e session.ResponseStarted) {
	t.out.active, t.out.activeID, t.out.activeOurs, t.out.newReply = true, e.Response.ID, t.out.ours, true
	if t.out.resampler != nil {
		t.out.resampler.Reset()
	}
	if t.out.ours {
		t.out.ours = false
		return
	}
	if t.deleg.suppress {
		t.deleg.suppress, t.deleg.cancel = false, e.Response.ID
	}
}
