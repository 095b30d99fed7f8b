package live

import (
	"crypto/rand"
	"encoding/hex"
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
// session.delegation.created, and the spoken acknowledgement after acknowledgement_delay_ms.
// A Responses delegation's task is queued to run on the local thinker (tasks.go), or fails at
// once when it needs a tool omniserve cannot run.
func (t *Translator) delegate(offsetMs int64) []protocol.ServerEvent {
	t.deleg.armed = false
	d := Delegation{ID: newID("item_"), Type: "delegation", Target: t.cfg.delegation.Type}
	var evs []protocol.ServerEvent
	if d.Target == "responses" {
		d.ResponseID = newID("resp_")
		evs = append([]protocol.ServerEvent{delegationCreated{Delegation: d, OffsetMs: offsetMs}}, t.tasks.add(t.cfg.delegation.Responses, d.ResponseID, d.ID, "")...)
	} else {
		t.deleg.ids = append(t.deleg.ids, d.ID)
		evs = []protocol.ServerEvent{delegationCreated{Delegation: d, OffsetMs: offsetMs}}
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

// responsesCommand is response.create and response.item.create: Responses delegation only
// (tasks.go runs them).
func (t *Translator) responsesCommand(ev clientEvent) (session.Command, *protocol.Error) {
	if t.cfg.delegation.Type != "responses" {
		return nil, &protocol.Error{Code: "invalid_value", Param: "type", EventID: ev.id, Message: ev.typ + " requires Responses delegation."}
	}
	if ev.typ == "response.item.create" {
		return t.tasks.itemCreate(ev, func() string { return t.internalID("call") })
	}
	return t.tasks.responseCreate(ev, t.cfg.delegation.Responses)
}

// dueCommands are what is due now: the finished tasks' results joining the conversation, then
// at most one response, while the user is silent and no reply or task runs: the delegation's
// spoken acknowledgement once its delay passed, else a task's next run, else a commentary to
// say.
func (t *Translator) dueCommands() []session.Command {
	cmds := t.sayResults()
	if id := t.deleg.cancel; id != "" {
		t.deleg.cancel = ""
		return append(cmds, &session.CancelResponse{Base: session.Base{ID: t.internalID("cancel"), Kind: "session.delegation.created"}, ResponseID: id})
	}
	if t.in.speaking || t.out.active || t.tasks.busy() {
		return cmds
	}
	if c := t.nextResponse(); c != nil {
		cmds = append(cmds, c)
	}
	return cmds
}

// nextResponse is the response to ask for now (nil: none): the acknowledgement, a task's run
// or a commentary. The translator's own spoken ones hold the track until they end.
func (t *Translator) nextResponse() *session.CreateResponse {
	if (!t.deleg.ackDue || t.tl.ms() < t.deleg.ackAtMs) && !t.in.deciding(t.tl.ms()) {
		if c := t.tasks.ask(t.cfg.delegation.Responses, func() string { return t.internalID("task") }); c != nil {
			return c
		}
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
	return c
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
	t.in.decideByMs = 0 // the engine's reply: it decided
	if t.deleg.suppress {
		t.deleg.suppress, t.deleg.cancel = false, e.Response.ID
	}
}
