package live

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// node is the shape of a JSON value Live's config allows: an object's keys (each with its own
// shape; nil: any value), an array's elements. A value of another JSON type than the node
// expects is left to the typed decoding, which names its path too.
type node struct {
	fields map[string]*node
	elem   *node
}

func obj(fields map[string]*node) *node { return &node{fields: fields} }
func arr(elem *node) *node              { return &node{elem: elem} }

// leaf is a value with no keys of its own to check (a string, a number, a free-form object).
var leaf *node

// sessionSchema is SessionConfig as the SDK's types define it (the openai package's
// resources/live types); media is its MediaSessionConfig, WebRTC's, which has no audio.format
// (the codec is negotiated in the SDP).
// Hosted tools (web_search, mcp, ...) keep their own vocabularies, which the Responses API
// checks; omniserve passes them to the task that refuses them by type (tasks.go), and checks
// tool_choice against the function tools (toolChoice).
func sessionSchema(media bool) *node {
	part := obj(map[string]*node{"type": leaf, "text": leaf})
	item := obj(map[string]*node{"type": leaf, "role": leaf, "content": arr(part), "id": leaf, "status": leaf})
	responses := obj(map[string]*node{"model": leaf, "instructions": leaf, "max_output_tokens": leaf, "parallel_tool_calls": leaf,
		"reasoning": obj(map[string]*node{"effort": leaf, "summary": leaf}), "service_tier": leaf,
		"text": obj(map[string]*node{"verbosity": leaf}), "tool_choice": leaf, "tools": arr(leaf)})
	delegation := obj(map[string]*node{"type": leaf, "acknowledgement_delay_ms": leaf, "responses": responses,
		"decisions": obj(map[string]*node{"model": leaf, "questions": leaf})})
	audio := map[string]*node{"output": obj(map[string]*node{"voice": obj(map[string]*node{"id": leaf})})}
	if !media {
		audio["format"] = obj(map[string]*node{"type": leaf, "rate": leaf})
	}
	return obj(map[string]*node{
		"model": leaf, "instructions": leaf, "input": arr(item), "audio": obj(audio),
		"delegation": delegation, "store": leaf, "triggers": leaf, "client": leaf,
	})
}

// updateSchema is session.update's session: only what may change after the start.
func updateSchema() *node {
	return obj(map[string]*node{"delegation": sessionSchema(false).fields["delegation"], "triggers": leaf})
}

// checkKeys refuses the first key of raw that n does not allow, depth first in the order of the
// document, naming its dotted path (unknown_parameter, as api.openai.com answers).
func checkKeys(raw json.RawMessage, n *node, path string) *protocol.Error {
	if n == nil {
		return nil
	}
	raw = bytes.TrimSpace(raw)
	switch {
	case n.fields != nil && len(raw) > 0 && raw[0] == '{':
		return checkObject(raw, n, path)
	case n.elem != nil && len(raw) > 0 && raw[0] == '[':
		var elems []json.RawMessage
		if json.Unmarshal(raw, &elems) != nil {
			return nil // the typed decoding says why
		}
		for i, e := range elems {
			if werr := checkKeys(e, n.elem, path+"["+strconv.Itoa(i)+"]"); werr != nil {
				return werr
			}
		}
	}
	return nil
}

func checkObject(raw json.RawMessage, n *node, path string) *protocol.Error {
	keys, vals, err := orderedObject(raw)
	if err != nil {
		return nil // the typed decoding says why
	}
	for i, k := range keys {
		sub, ok := n.fields[k]
		if !ok {
			return &protocol.Error{Code: "unknown_parameter", Param: path + "." + k,
				Message: fmt.Sprintf("Unknown parameter: '%s.%s'.", path, k)}
		}
		if werr := checkKeys(vals[i], sub, path+"."+k); werr != nil {
			return werr
		}
	}
	return nil
}

// orderedObject is a JSON object's keys and values in the order they are written.
func orderedObject(raw json.RawMessage) (keys []string, vals []json.RawMessage, err error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err = dec.Token(); err != nil {
		return nil, nil, err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		keys, vals = append(keys, k), append(vals, v)
	}
	return keys, vals, nil
}

// decodeStrict decodes raw into v and names the path of a value of the wrong type
// (invalid_type, param path.field).
func decodeStrict(raw json.RawMessage, v any, path string) *protocol.Error {
	err := json.Unmarshal(raw, v)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		p := path
		if te.Field != "" {
			p += "." + te.Field
		}
		return &protocol.Error{Code: "invalid_type", Param: p, Message: fmt.Sprintf("Invalid type for '%s': expected %s, got %s.", p, te.Type, te.Value)}
	}
	return &protocol.Error{Code: "invalid_value", Param: path, Message: fmt.Sprintf("Invalid value for '%s': %v", path, err)}
}

// startConfig is session.start's session, typed.
type startConfig struct {
	Model        *string         `json:"model"`
	Instructions *string         `json:"instructions"`
	Input        []InitialItem   `json:"input"`
	Audio        *startAudio     `json:"audio"`
	Delegation   json.RawMessage `json:"delegation"`
	Store        *bool           `json:"store"`
	Triggers     json.RawMessage `json:"triggers"`
	Client       json.RawMessage `json:"client"`
}

type startAudio struct {
	Format *AudioFormat `json:"format"`
	Output *struct {
		Voice json.RawMessage `json:"voice"`
	} `json:"output"`
}

// delegationConfig is the delegation object, typed.
type delegationConfig struct {
	Type       string           `json:"type"`
	AckDelayMs *int             `json:"acknowledgement_delay_ms"`
	Responses  *responsesConfig `json:"responses"`
	Decisions  json.RawMessage  `json:"decisions"`
}

// responsesConfig is the Responses delegation's backend configuration: what a task runs with
// on the local thinker (tasks.go). reasoning, service_tier and text are checked for their keys
// and echoed, not applied: the local thinker has none of them (docs/LIVE.md).
type responsesConfig struct {
	Model             *string           `json:"model"`
	Instructions      *string           `json:"instructions"`
	MaxOutputTokens   *int              `json:"max_output_tokens"`
	ParallelToolCalls *bool             `json:"parallel_tool_calls"`
	ToolChoice        json.RawMessage   `json:"tool_choice"`
	Tools             []json.RawMessage `json:"tools"`
}

// voices are the built-in voices the SDK lists; omniserve speaks every one with its one
// configured voice and echoes the name.
var voices = []string{"alloy", "ash", "ballad", "beacon", "bossa", "cedar", "cinder", "coral", "delta", "echo", "gleam",
	"marin", "meridian", "quartz", "ripple", "sage", "shida", "shimmer", "stone", "tempo", "verse", "vesper", "willow"}

// maxInitialItems bounds the start's history (Live's limit).
const maxInitialItems = 128

// resolved is a checked session.start: the resource the client is told of (less the session's
// own id and expiry), the session's configuration patch, the history to add, and what the
// translator keeps.
type resolved struct {
	res        Resource
	patch      session.ConfigPatch
	wire       session.AudioFormat // the session's input format (and output, but for 16 kHz PCM)
	delegation delegationConfig
	delegate   bool // the test hook's marker was in the instructions
	media      bool // a WebRTC session's start (POST /v1/live/sessions): its audio is RTP
}

// parseStart checks and resolves session.start's session (raw) for a server with test hooks
// on or off; media: a WebRTC session's MediaSessionConfig.
func parseStart(raw json.RawMessage, hooks, media bool) (*resolved, *protocol.Error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, &protocol.Error{Code: "missing_required_parameter", Param: "session", Message: "Missing required parameter: 'session'."}
	}
	if werr := checkKeys(raw, sessionSchema(media), "session"); werr != nil {
		return nil, werr
	}
	var c startConfig
	if werr := decodeStrict(raw, &c, "session"); werr != nil {
		return nil, werr
	}
	r := &resolved{media: media}
	steps := [...]func(*startConfig, *resolved) *protocol.Error{resolveModel, resolveAudio, resolveInput, resolveDelegation, resolveExtras}
	for _, step := range steps {
		if werr := step(&c, r); werr != nil {
			return nil, werr
		}
	}
	resolveInstructions(&c, r, hooks)
	return r, nil
}

func resolveModel(c *startConfig, r *resolved) *protocol.Error {
	if c.Model == nil || strings.TrimSpace(*c.Model) == "" {
		return &protocol.Error{Code: "missing_required_parameter", Param: "session.model", Message: "Missing required parameter: 'session.model'."}
	}
	r.res.Model = *c.Model
	r.patch.Model = c.Model
	return nil
}

// resolveInstructions passes the instructions on, less the test hook's marker when hooks are
// on (the model never sees it).
func resolveInstructions(c *startConfig, r *resolved, hooks bool) {
	r.res.Instructions = c.Instructions
	if c.Instructions == nil {
		return
	}
	text := *c.Instructions
	if hooks && strings.Contains(text, DelegateMarker) {
		r.delegate = true
		text = strings.TrimSpace(strings.ReplaceAll(text, DelegateMarker, ""))
	}
	r.patch.Instructions = &text
}

// DelegateMarker in a session's instructions makes its next user turn end in a delegation of
// the session's type (to the client, or a Responses task), on a server started with the Live test hooks (--live-test-hooks); it is removed
// before the instructions reach the model.
const DelegateMarker = "[[omniserve-test:delegate]]"

func resolveAudio(c *startConfig, r *resolved) *protocol.Error {
	f := AudioFormat{Type: "audio/pcm", Rate: 24000}
	if c.Audio != nil && c.Audio.Format != nil {
		f = *c.Audio.Format
	}
	wire, werr := sessionFormat(f)
	if werr != nil {
		return werr
	}
	r.wire = wire
	r.res.Audio.Format = f
	out := wire
	if wire.Type == "pcm16" {
		out = session.AudioFormat{Type: "pcm16", Rate: 24000} // the talker's rate; 16 kHz is resampled here
	}
	r.patch.InputFormat, r.patch.OutputFormat = &wire, &out
	voice := json.RawMessage(`"marin"`)
	if c.Audio != nil && c.Audio.Output != nil && len(c.Audio.Output.Voice) > 0 && string(c.Audio.Output.Voice) != "null" {
		voice = c.Audio.Output.Voice
	}
	name, werr := voiceName(voice)
	if werr != nil {
		return werr
	}
	r.res.Audio.Output.Voice = voice
	r.patch.Voice = &name
	return nil
}

// sessionFormat is the session's format for Live's f: PCM16 at 16 or 24 kHz, G.711 at 8 kHz.
func sessionFormat(f AudioFormat) (session.AudioFormat, *protocol.Error) {
	rates := map[string][]int{"audio/pcm": {16000, 24000}, "audio/pcmu": {8000}, "audio/pcma": {8000}}
	types := map[string]string{"audio/pcm": "pcm16", "audio/pcmu": "g711_ulaw", "audio/pcma": "g711_alaw"}
	ok, known := rates[f.Type]
	if !known {
		return session.AudioFormat{}, &protocol.Error{Code: "invalid_value", Param: "session.audio.format.type",
			Message: fmt.Sprintf("Invalid value for 'session.audio.format.type': %q. Supported: audio/pcm (16000 or 24000 Hz), audio/pcmu and audio/pcma (8000 Hz).", f.Type)}
	}
	if !slices.Contains(ok, f.Rate) {
		return session.AudioFormat{}, &protocol.Error{Code: "invalid_value", Param: "session.audio.format.rate",
			Message: fmt.Sprintf("Invalid value for 'session.audio.format.rate': %d. %s is supported at %v Hz.", f.Rate, f.Type, ok)}
	}
	return session.AudioFormat{Type: types[f.Type], Rate: f.Rate}, nil
}

// voiceName is the voice's name: a built-in name, or a custom voice's {id} (spoken with the
// server's voice, as every name is).
func voiceName(raw json.RawMessage) (string, *protocol.Error) {
	var name string
	if json.Unmarshal(raw, &name) == nil {
		if !slices.Contains(voices, name) {
			return "", &protocol.Error{Code: "invalid_value", Param: "session.audio.output.voice",
				Message: fmt.Sprintf("Invalid value for 'session.audio.output.voice': %q. Supported: %s, or {\"id\": ...}.", name, strings.Join(voices, ", "))}
		}
		return name, nil
	}
	var custom struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(raw, &custom) != nil || strings.TrimSpace(custom.ID) == "" || len(custom.ID) > 64 {
		return "", &protocol.Error{Code: "invalid_type", Param: "session.audio.output.voice",
			Message: "'session.audio.output.voice' must be a voice name or {\"id\": \"...\"} (at most 64 characters)."}
	}
	return custom.ID, nil
}

func resolveInput(c *startConfig, r *resolved) *protocol.Error {
	if len(c.Input) > maxInitialItems {
		return &protocol.Error{Code: "invalid_value", Param: "session.input", Message: fmt.Sprintf("'session.input' holds at most %d messages.", maxInitialItems)}
	}
	r.res.Input = []InitialItem{}
	for i, it := range c.Input {
		p := fmt.Sprintf("session.input[%d]", i)
		if it.Type == "" {
			it.Type = "message"
		}
		if it.Type != "message" {
			return &protocol.Error{Code: "invalid_value", Param: p + ".type", Message: "An initial item is a message."}
		}
		if werr := checkItem(it, p); werr != nil {
			return werr
		}
		r.res.Input = append(r.res.Input, it)
	}
	return nil
}

// checkItem checks an initial message: a role of developer, user or assistant and one text
// part of the role's type.
func checkItem(it InitialItem, p string) *protocol.Error {
	if !slices.Contains([]string{"developer", "user", "assistant"}, it.Role) {
		return &protocol.Error{Code: "invalid_value", Param: p + ".role", Message: fmt.Sprintf("Invalid value for '%s.role': %q (developer, user or assistant).", p, it.Role)}
	}
	if len(it.Content) != 1 {
		return &protocol.Error{Code: "invalid_value", Param: p + ".content", Message: fmt.Sprintf("'%s.content' holds exactly one text part.", p)}
	}
	allowed := []string{"", "input_text"}
	if it.Role == "assistant" {
		allowed = []string{"", "text", "output_text"}
	}
	if !slices.Contains(allowed, it.Content[0].Type) {
		return &protocol.Error{Code: "invalid_value", Param: p + ".content[0].type", Message: fmt.Sprintf("Invalid content type %q for a %s message.", it.Content[0].Type, it.Role)}
	}
	return nil
}

func resolveDelegation(c *startConfig, r *resolved) *protocol.Error {
	d, werr := parseDelegation(c.Delegation, "session.delegation")
	if werr != nil {
		return werr
	}
	r.delegation = d
	r.res.Delegation = delegationJSON(c.Delegation, d)
	return nil
}

// parseDelegation checks a delegation object: client (the default, also for null) or
// responses; decisions needs a Decisions backend omniserve does not have.
func parseDelegation(raw json.RawMessage, path string) (delegationConfig, *protocol.Error) {
	d := delegationConfig{Type: "client"}
	if len(raw) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return d, nil
	}
	if werr := decodeStrict(raw, &d, path); werr != nil {
		return d, werr
	}
	if d.AckDelayMs != nil && *d.AckDelayMs < 0 {
		return d, &protocol.Error{Code: "invalid_value", Param: path + ".acknowledgement_delay_ms", Message: "acknowledgement_delay_ms must be 0 or more."}
	}
	switch d.Type {
	case "client":
		if d.Responses != nil || len(d.Decisions) > 0 {
			return d, &protocol.Error{Code: "unknown_parameter", Param: path + ".responses", Message: "Client delegation has no backend configuration."}
		}
	case "responses":
		return d, checkResponses(d, path)
	case "decisions":
		return d, &protocol.Error{Code: "invalid_value", Param: path + ".type",
			Message: "Decisions delegation is not supported by omniserve (it has no Decisions backend); use client or responses."}
	default:
		return d, &protocol.Error{Code: "invalid_value", Param: path + ".type", Message: fmt.Sprintf("Invalid value for '%s.type': %q (client or responses).", path, d.Type)}
	}
	return d, nil
}

// checkResponses checks a Responses delegation: a model, max_output_tokens ≥ 16, and tools
// that are objects with a type; a function tool has only its own keys.
func checkResponses(d delegationConfig, path string) *protocol.Error {
	if d.Responses == nil || d.Responses.Model == nil || *d.Responses.Model == "" {
		return &protocol.Error{Code: "missing_required_parameter", Param: path + ".responses.model", Message: "Missing required parameter: 'responses.model'."}
	}
	if m := d.Responses.MaxOutputTokens; m != nil && *m < 16 {
		return &protocol.Error{Code: "invalid_value", Param: path + ".responses.max_output_tokens", Message: "max_output_tokens must be at least 16."}
	}
	var functions []string
	for i, raw := range d.Responses.Tools {
		name, werr := checkTool(raw, fmt.Sprintf("%s.responses.tools[%d]", path, i))
		if werr != nil {
			return werr
		}
		if name != "" {
			functions = append(functions, name)
		}
	}
	_, werr := toolChoice(d.Responses.ToolChoice, functions, path+".responses.tool_choice")
	return werr
}

// toolChoice is the Responses tool_choice raw (null: the thinker's default, auto) for a task
// whose function tools are functions: "auto", "none", "required" or {type: "function", name}
// of one of them; a choice of another type (a hosted tool's, mcp, allowed_tools) is returned
// as Mode that type, for the task to refuse by name. The error names path.
func toolChoice(raw json.RawMessage, functions []string, path string) (*session.ToolChoice, *protocol.Error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		if !slices.Contains([]string{"auto", "none", "required"}, mode) {
			return nil, &protocol.Error{Code: "invalid_value", Param: path, Message: fmt.Sprintf("Invalid value for '%s': %q (auto, none, required, or an object).", path, mode)}
		}
		if mode == "required" && len(functions) == 0 {
			return nil, &protocol.Error{Code: "invalid_value", Param: path, Message: "tool_choice required needs a function tool."}
		}
		return &session.ToolChoice{Mode: mode}, nil
	}
	var c struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if werr := decodeStrict(raw, &c, path); werr != nil {
		return nil, werr
	}
	switch {
	case c.Type == "":
		return nil, &protocol.Error{Code: "missing_required_parameter", Param: path + ".type", Message: "A tool_choice object needs a type."}
	case c.Type != "function":
		return &session.ToolChoice{Mode: c.Type}, nil
	case !slices.Contains(functions, c.Name):
		return nil, &protocol.Error{Code: "invalid_value", Param: path + ".name", Message: fmt.Sprintf("tool_choice names function %q, which is not among the function tools.", c.Name)}
	}
	return &session.ToolChoice{Mode: "function", Function: c.Name}, nil
}

// checkTool checks one tool of a Responses delegation; it returns a function tool's name ("" for
// a hosted tool, which the task refuses by type when it runs).
func checkTool(raw json.RawMessage, p string) (string, *protocol.Error) {
	var t struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if werr := decodeStrict(raw, &t, p); werr != nil {
		return "", werr
	}
	if t.Type == "" {
		return "", &protocol.Error{Code: "missing_required_parameter", Param: p + ".type", Message: "A tool needs a type."}
	}
	if t.Type != "function" {
		return "", nil // hosted: the task refuses what omniserve cannot run, by name
	}
	fn := obj(map[string]*node{"type": leaf, "name": leaf, "description": leaf, "parameters": leaf, "strict": leaf})
	if werr := checkKeys(raw, fn, p); werr != nil {
		return "", werr
	}
	if t.Name == "" {
		return "", &protocol.Error{Code: "missing_required_parameter", Param: p + ".name", Message: "A function tool needs a name."}
	}
	return t.Name, nil
}

// delegationJSON is the delegation as the resource shows it: the client's object with
// acknowledgement_delay_ms filled in, or {type: client, acknowledgement_delay_ms: 0} for none.
func delegationJSON(raw json.RawMessage, d delegationConfig) json.RawMessage {
	m := map[string]any{}
	if len(raw) > 0 && string(bytes.TrimSpace(raw)) != "null" {
		_ = json.Unmarshal(raw, &m) // checked by parseDelegation
	}
	m["type"] = d.Type
	if _, ok := m["acknowledgement_delay_ms"]; !ok {
		m["acknowledgement_delay_ms"] = 0
	}
	out, _ := json.Marshal(m) // decoded from JSON: encodes
	return out
}

// resolveExtras refuses what omniserve cannot honour: store (no fork or recording), triggers
// (no Decisions backend), client (WebRTC's data channel permissions).
func resolveExtras(c *startConfig, r *resolved) *protocol.Error {
	if c.Store != nil && *c.Store {
		return &protocol.Error{Code: "invalid_value", Param: "session.store", Message: "store: true is not supported by omniserve (no forks or recordings); omit it or set false."}
	}
	if len(c.Triggers) > 0 && string(c.Triggers) != "null" && string(c.Triggers) != "[]" {
		return &protocol.Error{Code: "invalid_value", Param: "session.triggers", Message: "Decisions triggers are not supported by omniserve (it has no Decisions backend)."}
	}
	if len(c.Client) > 0 && string(c.Client) != "null" {
		msg := "session.client is for WebRTC sessions; this is a WebSocket."
		if r != nil && r.media {
			msg = "session.client (the data channel's event permissions) is not supported by omniserve: every client and server event is allowed on oai-events; omit it."
		}
		return &protocol.Error{Code: "invalid_value", Param: "session.client", Message: msg}
	}
	return nil
}
