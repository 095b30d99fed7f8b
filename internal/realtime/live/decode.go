package live

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// Name is the dialect's label in metrics and logs.
const Name = "live"

// Options are the server's settings of a Live session.
type Options struct {
	// ContextTokens is the context (n_ctx) of one session's KV sequence, the denominator of
	// context_window.usage_ratio; 0: unknown, and the ratio is left out.
	ContextTokens int
	// TestHooks turns on the scripted decider of the tests (--live-test-hooks): instructions
	// with DelegateMarker delegate the next user turn (to the client, or to a Responses task).
	TestHooks bool
	// IdleTimeout is the server's idle timeout, which a started session has; before its start
	// a session has the connection's handshake timeout instead (StartPatch), so a socket that
	// never sends session.start does not hold a slot. 0: no start deadline.
	IdleTimeout time.Duration
	// OutputLead is how far the output track may run ahead of real time (0: DefaultOutputLead).
	OutputLead time.Duration
}

// SessionOptions are the options of a Live session's duplex session: auto-response, the end at
// expires_at (Live announces it and ends the session there with "expired"), and the output track paced with o's lead in frames of half of it (at most 100 ms, at least 20 ms). A
// Live client cannot flush what it received, so after a barge-in it plays between the lead and
// the lead plus one frame of the old reply: the lead is what the track buys against the
// network's and the server's jitter, paid for at every barge-in.
func (o Options) SessionOptions() session.Options {
	lead := o.OutputLead
	if lead <= 0 {
		lead = DefaultOutputLead
	}
	return session.Options{Duplex: true, Dialect: Name, EndsAtExpiry: true, MaxOutputLead: lead,
		OutputFrame: min(max(lead/2, 20*time.Millisecond), 100*time.Millisecond)}
}

// StartPatch is the configuration a Live session is created with, before its start: the idle
// timeout bounds the wait for session.start (nil: none).
func (o Options) StartPatch(deadline time.Duration) *session.ConfigPatch {
	if o.IdleTimeout <= 0 || deadline <= 0 {
		return nil
	}
	s := deadline.Seconds()
	return &session.ConfigPatch{IdleTimeoutS: &s}
}

// DefaultOutputLead is how far a Live session's output track runs ahead of real time unless the
// server says otherwise (realtime.live_output_lead): Live's audio cannot be recalled (there is no
// clear), so little is sent that a barge-in would cut. At 100 ms (deltas of 50 ms) a Live
// client's barge-in onset → silence measured within 20 ms of a Realtime client's, which stops at
// the clear; at 200 ms (deltas of 100 ms), 212–263 ms later (docs/BENCHMARKS.md).
const DefaultOutputLead = 100 * time.Millisecond

// Reply is Decode's answer to a frame the dialect answers itself, in whole or in part: Events go
// to the client at once, in order, then Commands to the session, in order.
type Reply struct {
	session.Base
	Events   []protocol.ServerEvent
	Commands []session.Command
}

// Answer implements the connection's self-answered command.
func (r *Reply) Answer() ([]protocol.ServerEvent, []session.Command) { return r.Events, r.Commands }

type phase int

const (
	notStarted phase = iota
	starting         // session.start was handed to the session, its answer is on its way
	started
)

// internalPrefix marks the event ids of the commands the translator makes itself (the start's
// update, the history, commentary's responses): their errors are told without a client event.
const internalPrefix = "omniserve-live-"

// Translator is the dialect for one session.
type Translator struct {
	opts     Options
	handlers map[string]handler

	mu    sync.Mutex
	phase phase
	// startID is the pending start's update (internal id), clientStartID the client's event id.
	startID, clientStartID string
	seq                    int
	cfg                    *resolved
	sessionID              string
	expiresAt              int64
	tl                     timeline
	muted                  bool
	in                     inputState
	out                    outputState
	// commentary are the reply budgets (max output tokens) of the commentary appends still to
	// be spoken, in order; asked is the one last asked for (again at the front if refused).
	commentary []int
	asked      int
	deleg      delegations
	tasks      tasks // the Responses delegation's tasks (tasks.go)
	// media: a WebRTC session (StartMedia): its audio is the call's RTP, its start the POST.
	media bool
}

// New returns a Live translator for a new session.
func New(opts Options) *Translator {
	t := &Translator{opts: opts}
	t.handlers = t.table()
	return t
}

// Name implements the connection's dialect.
func (*Translator) Name() string { return Name }

// Code implements the connection's dialect: Live uses the connection's codes as they are.
func (*Translator) Code(openAI string) string { return openAI }

// handler decodes one client event type: keys are the top-level keys it allows besides type
// and event_id.
type handler struct {
	keys []string
	fn   func(ev clientEvent) (session.Command, *protocol.Error)
}

// table is every client event type Live defines, with what omniserve does with it.
func (t *Translator) table() map[string]handler {
	unsupported := func(why string) func(clientEvent) (session.Command, *protocol.Error) {
		return func(ev clientEvent) (session.Command, *protocol.Error) {
			return nil, &protocol.Error{Code: "invalid_value", Param: "type", EventID: ev.id, Message: fmt.Sprintf("%s is not supported by omniserve: %s", ev.typ, why)}
		}
	}
	return map[string]handler{
		"session.start":                     {[]string{"session"}, t.start},
		"session.update":                    {[]string{"session"}, t.update},
		"session.input_audio.append":        {[]string{"audio"}, t.appendAudio},
		"session.input_audio.mute":          {nil, t.mute},
		"session.input_audio.unmute":        {nil, t.mute},
		"session.instructions.append":       {[]string{"content", "delegation_id"}, t.contextAppend},
		"session.thinking.append":           {[]string{"content", "delegation_id"}, t.contextAppend},
		"session.commentary.append":         {[]string{"content", "delegation_id"}, t.contextAppend},
		"session.close":                     {nil, t.close},
		"response.item.create":              {[]string{"item"}, t.responsesCommand},
		"response.create":                   {[]string{"response"}, t.responsesCommand},
		"decision.create":                   {[]string{"decision"}, unsupported("there is no Decisions backend")},
		"decision.item.create":              {[]string{"item"}, unsupported("there is no Decisions backend")},
		"decision.item.delete":              {[]string{"item_id"}, unsupported("there is no Decisions backend")},
		"session.output_audio.fixture.play": {[]string{"audio"}, unsupported("fixtures are not implemented")},
		"transport.dtmf.send":               {[]string{"event"}, unsupported("there are no SIP calls")},
	}
}

// clientEvent is one client frame: its type, event_id and top-level keys.
type clientEvent struct {
	typ, id string
	raw     map[string]json.RawMessage
}

func (ev clientEvent) base() session.Base { return session.Base{ID: ev.id, Kind: ev.typ} }

// Decode turns one client frame into a session command, a Reply, or the error event's error.
func (t *Translator) Decode(data []byte) (session.Command, *protocol.Error) {
	ev, werr := parseEvent(data)
	if werr != nil {
		return nil, werr
	}
	h, ok := t.handlers[ev.typ]
	if !ok {
		return nil, &protocol.Error{Code: "invalid_value", Param: "type", EventID: ev.id,
			Message: fmt.Sprintf("Invalid value for 'type': %q. Supported types: %s.", ev.typ, strings.Join(t.types(), ", "))}
	}
	for k := range ev.raw {
		if k != "type" && k != "event_id" && !slices.Contains(h.keys, k) {
			return nil, &protocol.Error{Code: "unknown_parameter", Param: k, EventID: ev.id, Message: fmt.Sprintf("Unknown parameter: '%s'.", k)}
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if werr := t.mediaRefuses(ev); werr != nil {
		return nil, werr
	}
	if ev.typ != "session.start" && t.phase == notStarted {
		return nil, &protocol.Error{Code: "session_not_started", EventID: ev.id,
			Message: fmt.Sprintf("%s before session.start: send session.start first and wait for session.started.", ev.typ)}
	}
	return h.fn(ev)
}

// types are the supported client event types, sorted.
func (t *Translator) types() []string {
	out := make([]string, 0, len(t.handlers))
	for k := range t.handlers {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// parseEvent reads a frame as a client event: a JSON object with a string type.
func parseEvent(data []byte) (clientEvent, *protocol.Error) {
	var ev clientEvent
	if !utf8.Valid(data) || json.Unmarshal(data, &ev.raw) != nil || ev.raw == nil {
		return ev, &protocol.Error{Code: "invalid_json", Message: "The event is not a JSON object."}
	}
	if v, ok := ev.raw["event_id"]; ok && string(v) != "null" {
		if json.Unmarshal(v, &ev.id) != nil {
			return ev, &protocol.Error{Code: "invalid_type", Param: "event_id", Message: "'event_id' must be a string."}
		}
	}
	v, ok := ev.raw["type"]
	if !ok {
		return ev, &protocol.Error{Code: "missing_required_parameter", Param: "type", EventID: ev.id, Message: "Missing required parameter: 'type'."}
	}
	if json.Unmarshal(v, &ev.typ) != nil {
		return ev, &protocol.Error{Code: "invalid_type", Param: "type", EventID: ev.id, Message: "'type' must be a string."}
	}
	return ev, nil
}

func (t *Translator) internalID(what string) string {
	t.seq++
	return internalPrefix + what + "-" + strconv.Itoa(t.seq)
}

// start is session.start: checked strictly, then the session's first update (and the history
// as items). The session's answer to the update is session.started (Encode).
func (t *Translator) start(ev clientEvent) (session.Command, *protocol.Error) {
	if t.phase != notStarted {
		return nil, &protocol.Error{Code: "session_already_started", EventID: ev.id, Message: "The session has already started; session.start is sent once."}
	}
	r, werr := parseStart(ev.raw["session"], t.opts.TestHooks, false)
	if werr != nil {
		werr.EventID = ev.id
		return nil, werr
	}
	reply, werr := t.begin(r, ev.base())
	if werr != nil {
		return nil, werr
	}
	return reply, nil
}

// begin makes the checked start r the session's: its first update (and the history as
// items), whose answer is session.started. base is the start's (session.start's, or the WebRTC
// POST's).
func (t *Translator) begin(r *resolved, base session.Base) (*Reply, *protocol.Error) {
	if err := t.out.setFormat(r); err != nil {
		return nil, &protocol.Error{Code: "invalid_value", Param: "session.audio.format", EventID: base.ID, Message: err.Error()}
	}
	t.phase, t.cfg, t.clientStartID = starting, r, base.ID
	t.startID = t.internalID("start")
	t.tl = timeline{rate: r.wire.Rate}
	t.deleg.armed = r.delegate
	if t.opts.IdleTimeout > 0 {
		idle := t.opts.IdleTimeout.Seconds() // the start deadline gives way to the idle timeout
		r.patch.IdleTimeoutS = &idle
	}
	cmds := []session.Command{&session.UpdateSession{Base: session.Base{ID: t.startID, Kind: base.Kind}, Patch: r.patch}}
	for _, it := range r.res.Input {
		role := it.Role
		if role == "developer" {
			role = "system"
		}
		cmds = append(cmds, &session.CreateItem{Base: session.Base{ID: t.internalID("input"), Kind: base.Kind}, Role: role, Text: it.Content[0].Text})
	}
	return &Reply{Base: base, Commands: cmds}, nil
}

// update is session.update: the delegation (of the same type) and the triggers (none: there is
// no Decisions backend); everything else is fixed at the start.
func (t *Translator) update(ev clientEvent) (session.Command, *protocol.Error) {
	raw := ev.raw["session"]
	if werr := checkKeys(raw, updateSchema(), "session"); werr != nil {
		werr.EventID = ev.id
		return nil, werr
	}
	var u struct {
		Delegation json.RawMessage `json:"delegation"`
		Triggers   json.RawMessage `json:"triggers"`
	}
	if werr := decodeStrict(raw, &u, "session"); werr != nil {
		werr.EventID = ev.id
		return nil, werr
	}
	if werr := resolveExtras(&startConfig{Triggers: u.Triggers}, nil); werr != nil {
		werr.EventID = ev.id
		return nil, werr
	}
	if len(u.Delegation) > 0 {
		d, werr := parseDelegation(u.Delegation, "session.delegation")
		if werr == nil && d.Type != t.cfg.delegation.Type {
			werr = &protocol.Error{Code: "invalid_value", Param: "session.delegation.type",
				Message: fmt.Sprintf("The delegation type is fixed for the session (%s).", t.cfg.delegation.Type)}
		}
		if werr != nil {
			werr.EventID = ev.id
			return nil, werr
		}
		t.cfg.delegation, t.cfg.res.Delegation = d, delegationJSON(u.Delegation, d)
	}
	return &Reply{Base: ev.base(), Events: []protocol.ServerEvent{sessionEvent{kind: "session.updated", ClientEventID: ev.id, Session: t.resource()}}}, nil
}

// appendAudio is session.input_audio.append: the timeline advances by its samples (muted: they
// are replaced by silence), and what came due on it goes out with it.
func (t *Translator) appendAudio(ev clientEvent) (session.Command, *protocol.Error) {
	var b64 string
	if v, ok := ev.raw["audio"]; !ok || json.Unmarshal(v, &b64) != nil {
		return nil, &protocol.Error{Code: "missing_required_parameter", Param: "audio", EventID: ev.id, Message: "Missing required parameter: 'audio' (base64 audio in the session's format)."}
	}
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, &protocol.Error{Code: "invalid_value", Param: "audio", EventID: ev.id, Message: fmt.Sprintf("'audio' is not valid base64: %v", err)}
	}
	n := len(data)
	if t.cfg.wire.Type == "pcm16" {
		if n%2 != 0 {
			return nil, &protocol.Error{Code: "invalid_value", Param: "audio", EventID: ev.id, Message: "PCM16 audio has an even number of bytes."}
		}
		n /= 2
	}
	return t.takeAudio(ev.base(), data, n), nil
}

// takeAudio is n samples of input audio (data, in the session's format) taken on the timeline:
// the session gets it (muted: silence of the same length), and what came due on the timeline
// goes out with it.
func (t *Translator) takeAudio(base session.Base, data []byte, n int) *Reply {
	if t.muted {
		data = silence(len(data), t.cfg.wire.Type)
	}
	due, usage := t.tl.advance(n)
	if usage {
		due = append(due, t.usage())
	}
	cmds := append([]session.Command{&session.AppendAudio{Base: base, Data: data}}, t.dueCommands()...)
	return &Reply{Base: base, Events: due, Commands: cmds}
}

// silence is n bytes of digital silence in the session's format.
func silence(n int, format string) []byte {
	b := make([]byte, n)
	fill := byte(0)
	switch format {
	case "g711_ulaw":
		fill = 0xFF
	case "g711_alaw":
		fill = 0xD5
	}
	if fill != 0 {
		for i := range b {
			b[i] = fill
		}
	}
	return b
}

// mute is session.input_audio.mute and unmute, answered at once (they have no timeline
// position).
func (t *Translator) mute(ev clientEvent) (session.Command, *protocol.Error) {
	t.muted = ev.typ == "session.input_audio.mute"
	kind := "session.input_audio.unmuted"
	if t.muted {
		kind = "session.input_audio.muted"
	}
	return &Reply{Base: ev.base(), Events: []protocol.ServerEvent{ackEvent{kind: kind, ClientEventID: ev.id}}}, nil
}

// maxAppendTokens bounds an append's content (Live's limit).
const maxAppendTokens = 500

// estimateTokens is the tokens of text at OpenAI's rule of thumb of 4 bytes a token: the
// dialect has no tokenizer of the thinker's (a remote thinker may have another).
func estimateTokens(text string) int { return (len(text) + 3) / 4 }

// commentaryBudget bounds the reply that says a commentary: a paraphrase, about as long as
// the text (twice its tokens, and room to start).
func commentaryBudget(text string) int { return 32 + 2*estimateTokens(text) }

// commentaryText is the developer message that asks the model to say text.
func commentaryText(text string) string { return "Tell the user this now, in your own words: " + text }

// ackTokens bounds the spoken acknowledgement of a delegation: a few words.
const ackTokens = 24

// contextAppend is session.instructions.append, thinking.append and commentary.append:
// developer text for the model (commentary: to be said), acked when the timeline reaches its
// end_ms. Commentary asks for a reply once the user has stopped.
func (t *Translator) contextAppend(ev clientEvent) (session.Command, *protocol.Error) {
	text, werr := appendContent(ev)
	if werr != nil {
		return nil, werr
	}
	if werr := t.checkDelegationID(ev); werr != nil {
		return nil, werr
	}
	kind := strings.TrimSuffix(ev.typ, ".append")
	switch kind {
	case "session.thinking":
		text = "Background context (do not say it unless asked): " + text
	case "session.commentary":
		text = commentaryText(text)
		t.commentary = append(t.commentary, commentaryBudget(text))
		t.deleg.ackDue = false // a commentary is the delegation's answer: no "I'm on it" any more
	}
	t.tl.ack(kind+".appended", ev.id)
	return &session.CreateItem{Base: ev.base(), Role: "system", Text: text}, nil
}

// appendContent is an append's content: a string of at most maxAppendTokens tokens.
func appendContent(ev clientEvent) (string, *protocol.Error) {
	var text string
	if v, ok := ev.raw["content"]; !ok || json.Unmarshal(v, &text) != nil {
		return "", &protocol.Error{Code: "missing_required_parameter", Param: "content", EventID: ev.id, Message: "Missing required parameter: 'content' (a string)."}
	}
	if strings.TrimSpace(text) == "" {
		return "", &protocol.Error{Code: "invalid_value", Param: "content", EventID: ev.id, Message: "'content' is empty."}
	}
	if n := estimateTokens(text); n > maxAppendTokens {
		return "", &protocol.Error{Code: "string_above_max_length", Param: "content", EventID: ev.id,
			Message: fmt.Sprintf("'content' is about %d tokens; an append holds at most %d.", n, maxAppendTokens)}
	}
	return text, nil
}

// checkDelegationID checks delegation_id: a required key, null or a delegation of this
// session (always null under Responses delegation).
func (t *Translator) checkDelegationID(ev clientEvent) *protocol.Error {
	v, ok := ev.raw["delegation_id"]
	if !ok {
		return &protocol.Error{Code: "missing_required_parameter", Param: "delegation_id", EventID: ev.id, Message: "Missing required parameter: 'delegation_id' (null or a delegation's id)."}
	}
	if string(bytes.TrimSpace(v)) == "null" {
		return nil
	}
	var id string
	if json.Unmarshal(v, &id) != nil {
		return &protocol.Error{Code: "invalid_type", Param: "delegation_id", EventID: ev.id, Message: "'delegation_id' must be a string or null."}
	}
	if t.cfg.delegation.Type == "responses" {
		return &protocol.Error{Code: "invalid_value", Param: "delegation_id", EventID: ev.id, Message: "Under Responses delegation, delegation_id must be null."}
	}
	if !t.deleg.known(id) {
		return &protocol.Error{Code: "invalid_value", Param: "delegation_id", EventID: ev.id, Message: fmt.Sprintf("Unknown delegation %q.", id)}
	}
	return nil
}

// close is session.close: the session ends, and session.closed is its last event.
func (t *Translator) close(ev clientEvent) (session.Command, *protocol.Error) {
	t.deleg.closeID = ev.id
	return &session.CloseSession{Base: ev.base()}, nil
}

// setFormat prepares the output track for r's format: 16 kHz PCM is resampled from the talker's
// 24 kHz.
func (o *outputState) setFormat(r *resolved) error {
	o.resampler = nil
	if r.wire.Type == "pcm16" && r.wire.Rate != 24000 {
		rs, err := audio.NewResampler(24000, r.wire.Rate)
		if err != nil {
			return fmt.Errorf("resampling the output: %w", err)
		}
		o.resampler = rs
	}
	return nil
}
