package vllm

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/openai"
	"github.com/omniserve/omniserve/internal/session"
)

// Name is the dialect's label in metrics and logs.
const Name = "vllm_duplex"

// aliases are vllm-omni's other names of client events (its normalize_duplex_input_event, and
// the older spellings its fork still sends), by the name they stand for.
var aliases = map[string]string{
	"push_chunk":         "input_audio_buffer.append",
	"input.audio.append": "input_audio_buffer.append",
	"push_text":          "input.text.append",
	"input_text.append":  "input.text.append",
	"close":              "session.close",
	"close_session":      "session.close",
	"signal_turn":        "turn.signal",
	"audio.playback_ack": "playback.ack",
}

// wavByDefault are the names whose audio is a WAV file unless format says otherwise.
var wavByDefault = map[string]bool{"push_chunk": true, "input.audio.append": true}

// Translator is the dialect for one session: Decode and Encode, and what input.commit needs
// to know of the input since the last commit. Decode runs on the connection's reader, Encode
// on the session's actor.
type Translator struct {
	mu       sync.Mutex
	openText strings.Builder // the open input item's text (text_input.go)
	audio    bool            // audio was appended since the last commit or clear
	keys     keys            // vllm-omni's session keys in force (session_keys.go)
	out      outState
}

// New returns the dialect's translator for a new session.
func New() *Translator { return &Translator{keys: newKeys()} }

// Name implements the connection's dialect.
func (*Translator) Name() string { return Name }

// Decode turns one client frame into a session command (vllm-omni's names first, then
// OpenAI's), or the error event's error with vllm-omni's code.
func (t *Translator) Decode(data []byte) (session.Command, *protocol.Error) {
	cmd, werr := t.decode(data)
	if werr != nil {
		werr.Code = Code(werr.Code)
		return nil, werr
	}
	t.track(cmd)
	return cmd, nil
}

func (t *Translator) decode(data []byte) (session.Command, *protocol.Error) {
	var raw map[string]json.RawMessage
	var typ, eventID string
	if !utf8.Valid(data) || json.Unmarshal(data, &raw) != nil || json.Unmarshal(raw["type"], &typ) != nil {
		return openai.Decode(data) // not an event: OpenAI's decoder says why
	}
	_ = json.Unmarshal(raw["event_id"], &eventID)
	name := typ
	if canon, ok := aliases[typ]; ok {
		name = canon
	}
	switch name {
	case "input.text.append":
		return t.textAppend(raw, session.Base{ID: eventID, Kind: typ})
	case "input.commit", "input_audio_buffer.commit":
		return t.commit(raw, name == "input.commit", session.Base{ID: eventID, Kind: typ})
	case "input_audio_buffer.append":
		return appendAudio(data, raw, typ, session.Base{ID: eventID, Kind: typ})
	case "response.create":
		return t.responseCreate(raw, base(eventID, typ))
	case "session.update":
		return t.sessionUpdate(raw, eventID, typ)
	case "playback.ack":
		return t.playbackAck(raw, typ)
	case "turn.signal":
		if cmd := signal(raw, base(eventID, typ)); cmd != nil {
			return cmd, nil
		}
	}
	if name != typ {
		raw["type"], _ = json.Marshal(name)
		return reDecode(raw, typ)
	}
	return openai.Decode(data)
}

// sessionUpdate is session.update with its session object nested, or flat (the event's own
// keys are the session's, less its type and id).
func (t *Translator) sessionUpdate(raw map[string]json.RawMessage, eventID, typ string) (session.Command, *protocol.Error) {
	if v, nested := raw["session"]; nested {
		var obj map[string]json.RawMessage
		if json.Unmarshal(v, &obj) != nil || obj == nil {
			return openai.Decode(mustMarshal(raw)) // not an object: OpenAI's decoder says why
		}
		return t.update(obj, eventID, typ)
	}
	flat := make(map[string]json.RawMessage, len(raw))
	for k, v := range raw {
		if k != "type" && k != "event_id" {
			flat[k] = v
		}
	}
	return t.update(flat, eventID, typ)
}

// mustMarshal re-encodes a decoded event (it came from JSON, so it encodes).
func mustMarshal(raw map[string]json.RawMessage) []byte {
	b, _ := json.Marshal(raw)
	return b
}

// playbackAck is playback.ack (and audio.playback_ack): OpenAI's decoding, plus committed_ms
// and the session's playback_commit_policy.
func (t *Translator) playbackAck(raw map[string]json.RawMessage, typ string) (session.Command, *protocol.Error) {
	var committed *int
	if v, ok := raw["committed_ms"]; ok && string(v) != "null" {
		var f float64
		if json.Unmarshal(v, &f) != nil || f < 0 {
			var eventID string
			_ = json.Unmarshal(raw["event_id"], &eventID)
			return nil, &protocol.Error{Code: "bad_event", Param: "committed_ms", EventID: eventID, Message: "committed_ms must be a non-negative number"}
		}
		n := int(f)
		committed = &n
	}
	raw["type"], _ = json.Marshal("playback.ack")
	cmd, werr := reDecode(raw, typ)
	if werr != nil {
		return nil, werr
	}
	if a, ok := cmd.(*session.PlaybackAck); ok {
		t.mu.Lock()
		a.CommittedMs, a.AckOnly = committed, t.keys.playbackPolicy == policyAckOnly
		t.mu.Unlock()
	}
	return cmd, nil
}

// The range of response.create's temperature: the session's, as the decoder checks
// session.temperature (vllm-omni passes any number on to the engine's sampling).
const maxTemperature = 2

// responseOptions decodes response.create with vllm-omni's per-response options: temperature samples
// this response alone (a number in [0, 2], else invalid_value naming it); speed other than 1 is
// refused by name, since omniserve's voice has one speed (its text-to-speech, flite behind the
// talker's pool, takes no rate per request). Every other field is OpenAI's.
func responseOptions(raw map[string]json.RawMessage, b session.Base) (session.Command, *protocol.Error) {
	var r map[string]json.RawMessage
	if json.Unmarshal(raw["response"], &r) != nil {
		return reDecode(raw, b.Kind) // absent, or not an object: OpenAI's decoder says so
	}
	if v, ok := r["speed"]; ok && string(v) != "null" {
		var speed float64
		if json.Unmarshal(v, &speed) != nil || speed != 1 {
			return nil, &protocol.Error{Code: "unsupported_response_option", Param: "response.speed", EventID: b.ID,
				Message: "response.speed is not supported by omniserve (its voice has one speed; see docs/REALTIME.md)"}
		}
	}
	var temp *float64
	if v, ok := r["temperature"]; ok && string(v) != "null" {
		var f float64
		if json.Unmarshal(v, &f) != nil || f < 0 || f > maxTemperature {
			return nil, &protocol.Error{Code: "invalid_value", Param: "response.temperature", EventID: b.ID,
				Message: fmt.Sprintf("response.temperature must be a number in [0, %d]", maxTemperature)}
		}
		temp = &f
	}
	delete(r, "temperature") // OpenAI's decoder refuses it: GA has no per-response temperature
	raw["response"] = mustMarshal(r)
	cmd, werr := reDecode(raw, b.Kind)
	if werr != nil {
		return nil, werr
	}
	if c, ok := cmd.(*session.CreateResponse); ok {
		c.Temperature = temp
	}
	return cmd, nil
}

// reDecode decodes ev (an event rewritten in OpenAI's spelling) and gives the command the name
// the client wrote, for its errors and logs.
func reDecode(ev any, typ string) (session.Command, *protocol.Error) {
	data, err := json.Marshal(ev)
	if err != nil {
		return nil, &protocol.Error{Code: "invalid_json", Message: fmt.Sprintf("re-encoding %s: %v", typ, err)}
	}
	cmd, werr := openai.Decode(data)
	if werr != nil {
		return nil, werr
	}
	setKind(cmd, typ)
	return cmd, nil
}

// setKind renames the commands the aliases produce to the client's own name.
func setKind(cmd session.Command, typ string) {
	switch c := cmd.(type) {
	case *session.AppendAudio:
		c.Kind = typ
	case *session.CloseSession:
		c.Kind = typ
	case *session.PlaybackAck:
		c.Kind = typ
	}
}

// commit is input_audio_buffer.commit and input.commit: response_create (or create_response)
// as given (commitCreate); input.commit asks for a response unless it says otherwise. The open
// input item's text (text_input.go) is committed with it as a user item: alone, it is answered
// when a response is asked for (there is no audio to commit). After audio, a commit of audio the
// engine already took is accepted, and is_speech false makes it a silence commit. During a
// response, input_audio_buffer.commit of a short remark is an acknowledgement (OverlapTiers).
func (t *Translator) commit(raw map[string]json.RawMessage, input bool, base session.Base) (session.Command, *protocol.Error) {
	create, werr := commitCreate(raw, input, base)
	if werr != nil {
		return nil, werr
	}
	silence, werr := notSpeech(raw, base)
	if werr != nil {
		return nil, werr
	}
	if werr := checkFinal(raw, base); werr != nil {
		return nil, werr
	}
	text := t.pendingText()
	t.mu.Lock()
	audio := t.audio
	t.mu.Unlock()
	if !text {
		// vllm-omni's tiers for a commit during a response are input_audio_buffer.commit's:
		// input.commit asks for its answer whatever overlapped.
		return &session.CommitInput{Base: base, ResponseCreate: create, AcceptConsumed: audio, Silence: silence && audio,
			OverlapTiers: !input}, nil
	}
	var inner session.Command
	switch {
	case audio:
		inner = &session.CommitInput{Base: base, ResponseCreate: create, AcceptConsumed: true, Silence: silence}
	case create != nil && *create:
		// Text alone: its item is committed and answered (there is no audio to commit).
		inner = &session.CreateResponse{Base: base}
	}
	// Text alone without a request for a response: committed, waiting for response.create,
	// as vllm-omni's commit of text that is not speech.
	return &withText{Base: base, t: t, inner: inner}, nil
}

// commitCreate is a commit's request for a response: nil when the engine decides (false, or
// absent from input_audio_buffer.commit), true when asked (input.commit's default).
func commitCreate(raw map[string]json.RawMessage, input bool, base session.Base) (*bool, *protocol.Error) {
	var create *bool
	for _, k := range []string{"response_create", "create_response"} {
		v, ok := raw[k]
		if !ok || string(v) == "null" {
			continue
		}
		var b bool
		if json.Unmarshal(v, &b) != nil {
			return nil, &protocol.Error{Code: "invalid_type", Param: k, EventID: base.ID, Message: fmt.Sprintf("'%s' must be a boolean", k)}
		}
		create = &b
		break
	}
	switch {
	case create != nil && !*create:
		create = nil // false: auto_response and the engine decide, as when absent from input_audio_buffer.commit
	case create == nil && input:
		yes := true // input.commit asks for a response unless it says otherwise
		create = &yes
	}
	return create, nil
}

// checkFinal reads a commit's final: true (the default) is what every commit is; false is
// refused by name.
func checkFinal(raw map[string]json.RawMessage, base session.Base) *protocol.Error {
	v, ok := raw["final"]
	if !ok || string(v) == "null" {
		return nil
	}
	var b bool
	if json.Unmarshal(v, &b) != nil {
		return &protocol.Error{Code: "invalid_type", Param: "final", EventID: base.ID, Message: "'final' must be a boolean"}
	}
	if !b {
		return &protocol.Error{Code: "unsupported_value", Param: "final", EventID: base.ID,
			Message: "final: false is not served: a commit always ends the utterance (append more audio before committing)"}
	}
	return nil
}

// notSpeech reads a commit's is_speech: true when the client says the input is not speech.
func notSpeech(raw map[string]json.RawMessage, base session.Base) (bool, *protocol.Error) {
	v, ok := raw["is_speech"]
	if !ok || string(v) == "null" {
		return false, nil
	}
	var b bool
	if json.Unmarshal(v, &b) != nil {
		return false, &protocol.Error{Code: "invalid_type", Param: "is_speech", EventID: base.ID, Message: "'is_speech' must be a boolean"}
	}
	return !b, nil
}

// appendAudio is input_audio_buffer.append in vllm-omni's spellings: input_audio_format for
// format, sample_rate for sample_rate_hz, pcm_s16le and s16le for pcm16, and a WAV file (the
// format push_chunk and input.audio.append default to), whose samples are appended as PCM16 at
// the file's rate. An append in OpenAI's spelling is decoded as it came (no copy of its audio).
func appendAudio(data []byte, raw map[string]json.RawMessage, typ string, base session.Base) (session.Command, *protocol.Error) {
	changed := typ != "input_audio_buffer.append"
	rename := func(from, to string) {
		if v, ok := raw[from]; ok {
			if _, has := raw[to]; !has {
				raw[to] = v
			}
			delete(raw, from)
			changed = true
		}
	}
	rename("input_audio_format", "format")
	rename("sample_rate", "sample_rate_hz")
	var format string
	if v, ok := raw["format"]; ok {
		_ = json.Unmarshal(v, &format) // an object is OpenAI's {type, rate}: its decoder reads it
	} else if wavByDefault[typ] {
		format = "wav"
	}
	switch format {
	case "wav", "audio/wav":
		return wavAppend(raw, base)
	case "pcm_s16le", "s16le":
		raw["format"], _ = json.Marshal("pcm16")
		changed = true
	}
	if !changed {
		return openai.Decode(data)
	}
	raw["type"], _ = json.Marshal("input_audio_buffer.append")
	return reDecode(raw, typ)
}

// wavAppend decodes an append whose audio is a WAV file.
func wavAppend(raw map[string]json.RawMessage, base session.Base) (session.Command, *protocol.Error) {
	var b64 string
	if v, ok := raw["audio"]; !ok || json.Unmarshal(v, &b64) != nil {
		return nil, &protocol.Error{Code: "bad_event", Param: "audio", EventID: base.ID, Message: "missing required parameter 'audio' (a base64 WAV file)"}
	}
	file, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, &protocol.Error{Code: "bad_audio", Param: "audio", EventID: base.ID, Message: fmt.Sprintf("'audio' is not valid base64: %v", err)}
	}
	samples, rate, err := audio.DecodeWAV(file)
	if err != nil {
		return nil, &protocol.Error{Code: "bad_audio", Param: "audio", EventID: base.ID, Message: fmt.Sprintf("'audio' is not a WAV file omniserve reads: %v", err)}
	}
	return &session.AppendAudio{Base: base, Data: audio.Float32ToPCM16Bytes(nil, samples), Format: &session.AudioFormat{Type: "pcm16", Rate: rate}}, nil
}

// track notes what input.commit needs to know of the input since the last commit.
func (t *Translator) track(cmd session.Command) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch c := cmd.(type) {
	case *session.AppendAudio:
		t.audio = true
		t.out.heardMs += durationMs(c)
	case *session.CommitInput, *session.CreateResponse, *withText:
		t.audio = false
	case *session.ClearInput, *session.CancelInput, *session.BargeIn:
		t.audio = false
		t.openText.Reset()
	}
}

// durationMs is the duration of an append's audio: PCM16 (the dialect's formats all decode to
// it but pcm_f32le and G.711) at its rate, the dialect's 16 kHz when it names none.
func durationMs(c *session.AppendAudio) float64 {
	rate, width := defaultInputRate, 2
	if c.Format != nil {
		if c.Format.Rate > 0 {
			rate = c.Format.Rate
		}
		switch c.Format.Type {
		case "pcm_f32le":
			width = 4
		case "g711_ulaw", "g711_alaw":
			rate, width = 8000, 1
		}
	}
	return float64(len(c.Data)) * 1000 / float64(rate*width)
}

// base is a command's event id and the name the client wrote.
func base(eventID, typ string) session.Base { return session.Base{ID: eventID, Kind: typ} }

// actingSignals are the turn.signal events that act (OpenAI's decoder reads them), or that
// vllm-omni turns into another event with its payload (not served: refused as OpenAI refuses
// them, with the event named).
var actingSignals = map[string]bool{"input.cancel": true, "response.cancel": true, "barge_in": true,
	"session.update": true, "conversation.item.create": true, "conversation.item.delete": true,
	"conversation.item.retrieve": true, "conversation.item.truncate": true}

// signal is turn.signal with an event that asks for no action (user_started, assistant_done...):
// answered with turn.event; nil for the others.
func signal(raw map[string]json.RawMessage, b session.Base) session.Command {
	var ev string
	if json.Unmarshal(raw["event"], &ev) != nil || ev == "" || actingSignals[ev] {
		return nil
	}
	return &session.SignalTurn{Base: b, Event: ev}
}
