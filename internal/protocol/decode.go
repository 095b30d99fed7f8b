package protocol

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

type envelope struct {
	Type    *string `json:"type"`
	EventID string  `json:"event_id"`
}

// DecodeClientEvent parses one client event (a text frame) into its typed value, or the error
// event's fields when the event is refused.
func DecodeClientEvent(data []byte) (ClientEvent, *Error) {
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		var eid struct {
			EventID string `json:"event_id"`
		}
		_ = json.Unmarshal(data, &eid)
		return nil, &Error{Code: "invalid_json", Message: fmt.Sprintf("the event is not a JSON object: %v", err), EventID: eid.EventID}
	}
	// encoding/json silently turns invalid UTF-8 into U+FFFD: the event is refused instead, so
	// that no mangled text reaches the conversation (RFC 8259: JSON text is UTF-8).
	if !utf8.Valid(data) {
		return nil, &Error{Code: "invalid_json", Message: "the event is not valid UTF-8", EventID: env.EventID}
	}
	werr := func(code, param, format string, a ...any) *Error {
		return &Error{Code: code, Param: param, Message: fmt.Sprintf(format, a...), EventID: env.EventID}
	}
	if env.Type == nil || *env.Type == "" {
		return nil, werr("missing_required_parameter", "type", "missing required parameter 'type'")
	}
	typ := *env.Type
	base := Header{ID: env.EventID, Kind: typ}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, werr("invalid_json", "", "the event is not a JSON object: %v", err)
	}
	switch typ {
	case "session.update", "transcription_session.update":
		obj := flatSession(raw)
		if s, ok := raw["session"]; ok {
			obj = nil // a fresh map: Unmarshal into raw would merge the event's own keys
			if err := json.Unmarshal(s, &obj); err != nil || obj == nil {
				return nil, werr("invalid_type", "session", "'session' must be an object")
			}
		}
		p, e := decodePatch(obj)
		if e != nil {
			e.EventID = env.EventID
			return nil, e
		}
		return &SessionUpdate{Header: base, Session: p, BetaSpelling: betaSpelling(obj), Transcription: typ == "transcription_session.update"}, nil
	case "input_audio_buffer.append":
		b64, ok, e := str(raw, "audio")
		if e != nil || !ok {
			return nil, werr("missing_required_parameter", "audio", "missing required parameter 'audio' (base64)")
		}
		audio, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, werr("bad_audio", "audio", "'audio' is not valid base64: %v", err)
		}
		c := &InputAudioBufferAppend{Header: base, Audio: audio}
		if f, present, e := decodeFormat(raw, "format"); e != nil {
			e.EventID = env.EventID
			return nil, e
		} else if present {
			c.Format = &f
		}
		if rate, ok := intField(raw, "sample_rate_hz"); ok {
			if c.Format == nil {
				c.Format = &AudioFormat{Type: "pcm16"}
			}
			c.Format.Rate = rate
		}
		return c, nil
	case "input_audio_buffer.commit":
		c := &InputAudioBufferCommit{Header: base}
		if v, ok := raw["response_create"]; ok {
			var b bool
			if json.Unmarshal(v, &b) != nil {
				return nil, werr("invalid_type", "response_create", "'response_create' must be a boolean")
			}
			c.ResponseCreate = &b
		}
		return c, nil
	case "input_audio_buffer.clear":
		return &InputAudioBufferClear{Header: base}, nil
	case "response.create":
		return decodeResponseCreate(base, raw, werr)
	case "response.cancel":
		id, _, _ := str(raw, "response_id")
		return &ResponseCancel{Header: base, ResponseID: id}, nil
	case "conversation.item.create":
		return decodeItemCreate(base, raw, werr)
	case "conversation.item.delete", "conversation.item.retrieve":
		id, ok, _ := str(raw, "item_id")
		if !ok || id == "" {
			return nil, werr("missing_item_id", "item_id", "missing required parameter 'item_id'")
		}
		if typ == "conversation.item.delete" {
			return &ConversationItemDelete{Header: base, ItemID: id}, nil
		}
		return &ConversationItemRetrieve{Header: base, ItemID: id}, nil
	case "conversation.item.truncate":
		id, ok, _ := str(raw, "item_id")
		if !ok || id == "" {
			return nil, werr("missing_item_id", "item_id", "missing required parameter 'item_id'")
		}
		end, ok := intField(raw, "audio_end_ms")
		if !ok {
			return nil, werr("missing_required_parameter", "audio_end_ms", "missing required parameter 'audio_end_ms' (an integer)")
		}
		if end < 0 {
			return nil, werr("integer_below_min_value", "audio_end_ms", "Invalid 'audio_end_ms': integer below minimum value. Expected a value >= 0, but got %d instead.", end)
		}
		ci, ok := intField(raw, "content_index")
		if _, present := raw["content_index"]; present && !ok {
			return nil, werr("invalid_type", "content_index", "'content_index' must be an integer")
		}
		if ci < 0 {
			return nil, werr("integer_below_min_value", "content_index", "'content_index' must be >= 0")
		}
		return &ConversationItemTruncate{Header: base, ItemID: id, ContentIndex: ci, AudioEndMs: end}, nil
	case "output_audio_buffer.clear":
		id, _, _ := str(raw, "response_id")
		return &OutputAudioBufferClear{Header: base, ResponseID: id}, nil
	case "input.cancel":
		return &InputCancel{Header: base}, nil
	case "barge_in":
		return &BargeIn{Header: base}, nil
	case "session.close":
		return &SessionClose{Header: base}, nil
	case "session.heartbeat":
		return &SessionHeartbeat{Header: base}, nil
	case "session.resume":
		return decodeResume(base, raw, werr)
	case "session.event_ack":
		return decodeEventAck(base, raw), nil
	case "playback.ack":
		played, ok := intField(raw, "played_ms")
		if !ok || played < 0 {
			return nil, werr("missing_required_parameter", "played_ms", "missing or negative 'played_ms'")
		}
		c := &PlaybackAck{Header: base, PlayedMs: played}
		c.ResponseID, _, _ = str(raw, "response_id")
		c.ItemID, _, _ = str(raw, "item_id")
		if v, ok := raw["truncate"]; ok {
			_ = json.Unmarshal(v, &c.Truncate)
		}
		return c, nil
	case "turn.signal":
		ev, _, _ := str(raw, "event")
		switch ev {
		case "input.cancel":
			return &InputCancel{Header: base}, nil
		case "response.cancel":
			return &ResponseCancel{Header: base}, nil
		case "barge_in":
			return &BargeIn{Header: base}, nil
		}
		return nil, werr("invalid_value", "event", "unsupported turn.signal event %q", ev)
	}
	return nil, werr("unknown_event", "type", "unsupported event type %q", typ)
}

// decodeEventAck reads session.event_ack. It never fails: an ack is never answered (the answer
// would be numbered and acked in turn), so a bad one is marked with its problem instead.
func decodeEventAck(base Header, raw map[string]json.RawMessage) *SessionEventAck {
	c := &SessionEventAck{Header: base}
	v, ok := raw["server_event_seq"]
	if !ok {
		c.Problem = "missing server_event_seq"
		return c
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	seq, err := int64(0), dec.Decode(&n)
	if err == nil && bytes.HasPrefix(bytes.TrimSpace(v), []byte(`"`)) {
		err = fmt.Errorf("a string")
	}
	if err == nil {
		seq, err = n.Int64()
	}
	switch {
	case err != nil:
		c.Problem = "server_event_seq is not an integer"
	case seq < 0:
		c.Problem = "server_event_seq is negative"
	default:
		c.Seq = seq
	}
	return c
}

func decodeResume(base Header, raw map[string]json.RawMessage, werr func(code, param, format string, a ...any) *Error) (ClientEvent, *Error) {
	c := &SessionResume{Header: base}
	var ok bool
	var e *Error
	if c.SessionID, ok, e = str(raw, "session_id"); e != nil || !ok || c.SessionID == "" {
		return nil, werr("missing_required_parameter", "session_id", "missing required parameter 'session_id' (a string)")
	}
	if c.Token, ok, e = str(raw, "resume_token"); e != nil || !ok || c.Token == "" {
		return nil, werr("missing_required_parameter", "resume_token", "missing required parameter 'resume_token' (the token of session.created or of the last session.resumed)")
	}
	v, present := raw["last_received_server_event_seq"]
	if !present {
		return nil, werr("missing_required_parameter", "last_received_server_event_seq",
			"missing required parameter 'last_received_server_event_seq' (an integer >= 0; 0 when no event was received)")
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	seq, err := int64(0), dec.Decode(&n)
	if err == nil && bytes.HasPrefix(bytes.TrimSpace(v), []byte(`"`)) {
		err = fmt.Errorf("a string, not a number")
	}
	if err == nil {
		seq, err = n.Int64()
	}
	if err != nil {
		return nil, werr("invalid_type", "last_received_server_event_seq", "'last_received_server_event_seq' must be an integer")
	}
	if seq < 0 {
		return nil, werr("integer_below_min_value", "last_received_server_event_seq",
			"Invalid 'last_received_server_event_seq': integer below minimum value. Expected a value >= 0, but got %d instead.", seq)
	}
	c.LastSeq = seq
	return c, nil
}

func str(raw map[string]json.RawMessage, keys ...string) (string, bool, *Error) {
	for _, k := range keys {
		v, ok := raw[k]
		if !ok || bytes.Equal(v, []byte("null")) {
			continue
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", false, &Error{Code: "invalid_type", Param: k, Message: fmt.Sprintf("'%s' must be a string", k)}
		}
		return s, true, nil
	}
	return "", false, nil
}

func intField(raw map[string]json.RawMessage, keys ...string) (int, bool) {
	for _, k := range keys {
		v, ok := raw[k]
		if !ok {
			continue
		}
		var f float64
		if err := json.Unmarshal(v, &f); err != nil || f != float64(int(f)) {
			return 0, false
		}
		return int(f), true
	}
	return 0, false
}

func object(raw map[string]json.RawMessage, key string) map[string]json.RawMessage {
	v, ok := raw[key]
	if !ok {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil {
		return nil
	}
	return m
}

// decodeFormat reads a format given as a string or as {type|format, rate|sample_rate_hz}.
func decodeFormat(raw map[string]json.RawMessage, key string) (AudioFormat, bool, *Error) {
	v, ok := raw[key]
	if !ok || bytes.Equal(v, []byte("null")) {
		return AudioFormat{}, false, nil
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		return AudioFormat{Type: s}, true, nil
	}
	m := object(raw, key)
	if m == nil {
		return AudioFormat{}, false, &Error{Code: "invalid_type", Param: key, Message: fmt.Sprintf("'%s' must be a string or an object", key)}
	}
	t, _, _ := str(m, "type", "format")
	rate, _ := intField(m, "rate", "sample_rate_hz")
	return AudioFormat{Type: t, Rate: rate}, true, nil
}

func decodeTokens(v json.RawMessage, param string) (int, *Error) {
	var s string
	if json.Unmarshal(v, &s) == nil {
		switch strings.ToLower(s) {
		case "inf", "infinity", "unlimited":
			return 0, nil
		}
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n, nil
		}
	}
	var n float64
	if json.Unmarshal(v, &n) == nil && n >= 1 && n == float64(int(n)) {
		return int(n), nil
	}
	return 0, &Error{Code: "invalid_value", Param: param, Message: "must be a positive integer or \"inf\""}
}

func decodePatch(obj map[string]json.RawMessage) (SessionPatch, *Error) {
	var p SessionPatch
	if s, ok, e := str(obj, "model"); e != nil {
		return p, e
	} else if ok {
		p.Model = &s
	}
	for _, k := range []string{"output_modalities", "modalities"} {
		if v, ok := obj[k]; ok {
			if err := json.Unmarshal(v, &p.Modalities); err != nil {
				return p, &Error{Code: "invalid_type", Param: "session." + k, Message: "must be an array of strings"}
			}
			if p.Modalities == nil {
				p.Modalities = []string{}
			}
			break
		}
	}
	if s, ok, e := str(obj, "instructions"); e != nil {
		return p, e
	} else if ok {
		p.Instructions = &s
	}
	audio := object(obj, "audio")
	in, out := object(audio, "input"), object(audio, "output")
	if s, ok, _ := str(obj, "voice"); ok {
		p.Voice = &s
	} else if s, ok, _ := str(out, "voice"); ok {
		p.Voice = &s
	}
	if f, ok, e := decodeFormat(obj, "input_audio_format"); e != nil {
		return p, e
	} else if ok {
		p.InputFormat = &f
	} else if f, ok, e := decodeFormat(in, "format"); e != nil {
		return p, e
	} else if ok {
		p.InputFormat = &f
	}
	if rate, ok := intField(in, "sample_rate_hz"); ok {
		if p.InputFormat == nil {
			p.InputFormat = &AudioFormat{Type: "pcm16"}
		}
		p.InputFormat.Rate = rate
	}
	if f, ok, e := decodeFormat(obj, "output_audio_format"); e != nil {
		return p, e
	} else if ok {
		p.OutputFormat = &f
	} else if f, ok, e := decodeFormat(out, "format"); e != nil {
		return p, e
	} else if ok {
		p.OutputFormat = &f
	}
	td, tdOK := obj["turn_detection"]
	tdParam := "session.turn_detection"
	if !tdOK {
		td, tdOK = in["turn_detection"]
		tdParam = "session.audio.input.turn_detection"
	}
	if tdOK {
		p.TurnDetectionSet = true
		if !bytes.Equal(bytes.TrimSpace(td), []byte("null")) {
			t, e := decodeTurnDetection(td, tdParam)
			if e != nil {
				return p, e
			}
			p.TurnDetection = t
		}
	}
	if v, ok := obj["input_audio_transcription"]; ok {
		p.TranscriptionSet, p.Transcription = true, !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
	} else if v, ok := in["transcription"]; ok {
		p.TranscriptionSet, p.Transcription = true, !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
	}
	nr, nrOK := obj["input_audio_noise_reduction"]
	nrParam := "session.input_audio_noise_reduction"
	if !nrOK {
		nr, nrOK = in["noise_reduction"]
		nrParam = "session.audio.input.noise_reduction"
	}
	if nrOK {
		p.NoiseReductionSet = true
		if !bytes.Equal(bytes.TrimSpace(nr), []byte("null")) {
			var w struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal(nr, &w); err != nil {
				return p, &Error{Code: "invalid_type", Param: nrParam, Message: "noise_reduction must be null or an object {\"type\": \"near_field\" | \"far_field\"}"}
			}
			switch w.Type {
			case "near_field", "far_field":
				p.NoiseReduction = w.Type
			default:
				return p, &Error{Code: "invalid_value", Param: nrParam + ".type",
					Message: fmt.Sprintf("noise_reduction type %q is not supported (near_field or far_field)", w.Type)}
			}
		}
	}
	if s, ok, e := str(obj, "type"); e != nil {
		return p, e
	} else if ok {
		p.Type = &s
	}
	if v, ok := obj["tools"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		tools, mcp, e := decodeTools(v, "session.tools", true)
		if e != nil {
			return p, e
		}
		p.ToolsSet, p.Tools, p.MCPTools = true, tools, mcp
	}
	if v, ok := obj["tool_choice"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		tc, e := decodeToolChoice(v, "session.tool_choice")
		if e != nil {
			return p, e
		}
		p.ToolChoice = tc
	}
	if e := refuseUnhonoured(obj, out); e != nil {
		return p, e
	}
	if t, e := decodeTruncation(obj); e != nil {
		return p, e
	} else if t != nil {
		p.Truncation = t
	}
	if on, e := decodeInclude(obj); e != nil {
		return p, e
	} else if on != nil {
		p.TranscriptLogprobs = on
	}
	if v, ok := obj["tracing"]; ok {
		t, e := decodeTracing(v)
		if e != nil {
			return p, e
		}
		p.TracingSet, p.Tracing = true, t
	}
	if v, ok := obj["idle_timeout_s"]; ok {
		var f float64
		if json.Unmarshal(v, &f) != nil {
			return p, &Error{Code: "invalid_type", Param: "session.idle_timeout_s", Message: "must be a number"}
		}
		p.IdleTimeoutS = &f
	}
	extra := object(obj, "extra_body")
	for _, k := range []string{"auto_response", "full_duplex"} {
		if v, ok := extra[k]; ok {
			var b bool
			if json.Unmarshal(v, &b) != nil {
				return p, &Error{Code: "invalid_type", Param: "session.extra_body." + k, Message: "must be a boolean"}
			}
			if p.AutoResponse == nil || b {
				p.AutoResponse = &b
			}
		}
	}
	if v, ok := extra["seed"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		var f float64
		if json.Unmarshal(v, &f) != nil || f != math.Trunc(f) || f < 0 || f > math.MaxUint32 {
			return p, &Error{Code: "invalid_value", Param: "session.extra_body.seed", Message: fmt.Sprintf("seed must be an integer between 0 and %d", uint64(math.MaxUint32))}
		}
		seed := uint32(f)
		p.Seed = &seed
	}
	for _, k := range []string{"max_response_output_tokens", "max_output_tokens", "max_tokens"} {
		if v, ok := obj[k]; ok {
			n, e := decodeTokens(v, "session."+k)
			if e != nil {
				return p, e
			}
			p.MaxOutputTokens = &n
			break
		}
	}
	if v, ok := obj["temperature"]; ok {
		var f float64
		if json.Unmarshal(v, &f) != nil || f < 0 || f > 2 {
			return p, &Error{Code: "invalid_value", Param: "session.temperature", Message: "temperature must be a number in [0, 2]"}
		}
		p.Temperature = &f
	}
	return p, nil
}

// decodeTurnDetection reads a turn_detection object; absent fields take their type's defaults.
func decodeTurnDetection(raw json.RawMessage, param string) (*TurnDetection, *Error) {
	var w struct {
		Type              *string  `json:"type"`
		Threshold         *float64 `json:"threshold"`
		PrefixPaddingMs   *float64 `json:"prefix_padding_ms"`
		SilenceDurationMs *float64 `json:"silence_duration_ms"`
		IdleTimeoutMs     *float64 `json:"idle_timeout_ms"`
		CreateResponse    *bool    `json:"create_response"`
		InterruptResponse *bool    `json:"interrupt_response"`
		Eagerness         *string  `json:"eagerness"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, &Error{Code: "invalid_type", Param: param, Message: fmt.Sprintf("turn_detection must be null or an object with typed fields: %v", err)}
	}
	p := &TurnDetection{Type: w.Type, Threshold: w.Threshold, CreateResponse: w.CreateResponse,
		InterruptResponse: w.InterruptResponse, Eagerness: w.Eagerness}
	ms := func(v *float64, name string) (*int, *Error) {
		if v == nil {
			return nil, nil
		}
		if *v > 1<<31 || *v < -(1<<31) || *v != math.Trunc(*v) {
			return nil, &Error{Code: "invalid_type", Param: param + "." + name, Message: name + " must be an integer number of milliseconds"}
		}
		n := int(*v)
		return &n, nil
	}
	var e *Error
	if p.PrefixPaddingMs, e = ms(w.PrefixPaddingMs, "prefix_padding_ms"); e != nil {
		return nil, e
	}
	if p.SilenceDurationMs, e = ms(w.SilenceDurationMs, "silence_duration_ms"); e != nil {
		return nil, e
	}
	if p.IdleTimeoutMs, e = ms(w.IdleTimeoutMs, "idle_timeout_ms"); e != nil {
		return nil, e
	}
	return p, nil
}

func decodeResponseCreate(base Header, raw map[string]json.RawMessage, werr func(code, param, format string, a ...any) *Error) (ClientEvent, *Error) {
	c := &ResponseCreate{Header: base}
	if v, ok := raw["response"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) && object(raw, "response") == nil {
		return nil, werr("invalid_type", "response", "'response' must be an object")
	}
	r := object(raw, "response")
	if s, ok, e := str(r, "instructions"); e != nil {
		return nil, werr("invalid_type", "response.instructions", "'response.instructions' must be a string")
	} else if ok {
		c.Instructions = &s
	}
	if conv, ok, e := str(r, "conversation"); e != nil {
		return nil, werr("invalid_type", "response.conversation", "'response.conversation' must be \"auto\" or \"none\"")
	} else if ok {
		switch conv {
		case "auto":
		case "none":
			c.Conversation = "none"
		default:
			return nil, werr("invalid_value", "response.conversation", "'response.conversation' must be \"auto\" or \"none\"")
		}
	}
	if v, ok := r["input"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		in, e := decodeResponseInput(v)
		if e != nil {
			e.EventID = base.ID
			return nil, e
		}
		c.Input = in
	}
	for _, k := range []string{"prompt", "temperature", "reasoning"} {
		if v, ok := r[k]; ok && !bytes.Equal(v, []byte("null")) && c.Unsupported == "" {
			c.Unsupported = k
		}
	}
	if v, ok := r["tools"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		tools, _, e := decodeTools(v, "response.tools", false)
		if e != nil {
			e.EventID = base.ID
			return nil, e
		}
		c.ToolsSet, c.Tools = true, tools
	}
	if v, ok := r["tool_choice"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		tc, e := decodeToolChoice(v, "response.tool_choice")
		if e != nil {
			e.EventID = base.ID
			return nil, e
		}
		c.ToolChoice = tc
	}
	if v, ok := r["parallel_tool_calls"]; ok {
		var b bool
		if json.Unmarshal(v, &b) != nil {
			return nil, werr("invalid_type", "response.parallel_tool_calls", "'response.parallel_tool_calls' must be a boolean")
		}
		c.ParallelToolCalls = &b
	}
	for _, k := range []string{"max_output_tokens", "max_response_output_tokens"} {
		if v, ok := r[k]; ok {
			n, e := decodeTokens(v, "response."+k)
			if e != nil {
				e.EventID = base.ID
				return nil, e
			}
			c.MaxOutputTokens = &n
		}
	}
	for _, k := range []string{"output_modalities", "modalities"} {
		if v, ok := r[k]; ok {
			if json.Unmarshal(v, &c.Modalities) != nil {
				return nil, werr("invalid_type", "response."+k, "must be an array of strings")
			}
			if c.Modalities == nil {
				c.Modalities = []string{}
			}
		}
	}
	if v, ok := r["metadata"]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		if json.Unmarshal(v, &c.Metadata) != nil {
			return nil, werr("invalid_type", "response.metadata", "'response.metadata' must be an object of string values")
		}
	}
	out := object(object(r, "audio"), "output")
	if f, ok, e := decodeFormat(r, "output_audio_format"); e != nil {
		return nil, werr("invalid_type", "response.output_audio_format", "%s", e.Message)
	} else if ok {
		c.OutputFormat = &f
	} else if f, ok, e := decodeFormat(out, "format"); e != nil {
		return nil, werr("invalid_type", "response.audio.output.format", "%s", e.Message)
	} else if ok {
		c.OutputFormat = &f
	}
	// voice: omniserve's talker has one voice; the name is a label (as session.voice), accepted.
	return c, nil
}

func decodeItemCreate(base Header, raw map[string]json.RawMessage, werr func(code, param, format string, a ...any) *Error) (ClientEvent, *Error) {
	it := object(raw, "item")
	if it == nil {
		return nil, werr("missing_required_parameter", "item", "missing required parameter 'item'")
	}
	c := &ConversationItemCreate{Header: base}
	c.ItemID, _, _ = str(it, "id")
	if prev, ok, e := str(raw, "previous_item_id"); e != nil {
		return nil, werr("invalid_type", "previous_item_id", "'previous_item_id' must be a string")
	} else if ok {
		c.PreviousItemID = prev
	}
	typ, _, _ := str(it, "type")
	if typ == "function_call_output" {
		c.ItemType = typ
		callID, ok, e := str(it, "call_id")
		if e != nil || !ok || callID == "" {
			return nil, werr("missing_required_parameter", "item.call_id", "a function_call_output item needs the call_id of the call it answers")
		}
		output, ok, e := str(it, "output")
		if e != nil || !ok {
			return nil, werr("missing_required_parameter", "item.output", "a function_call_output item needs output (a string)")
		}
		c.CallID, c.Output = callID, output
		return c, nil
	}
	if typ == "function_call" {
		return decodeFunctionCallItem(c, it, werr)
	}
	if typ == "mcp_approval_response" {
		ev, e := decodeApprovalResponse(c, it)
		if e != nil {
			return nil, werr(e.Code, e.Param, "%s", e.Message)
		}
		return ev, nil
	}
	if typ != "" && typ != "message" {
		return nil, werr("invalid_value", "item.type", "unsupported item type %q (message, function_call, function_call_output or mcp_approval_response)", typ)
	}
	role, ok, _ := str(it, "role")
	if !ok || role == "" {
		return nil, werr("missing_required_parameter", "item.role", "missing required parameter 'item.role'")
	}
	c.Role = role
	var parts []map[string]json.RawMessage
	if v, ok := it["content"]; !ok || json.Unmarshal(v, &parts) != nil || len(parts) == 0 {
		return nil, werr("missing_required_parameter", "item.content", "'item.content' must be a non-empty array")
	}
	var text strings.Builder
	longest := -1
	for i, p := range parts {
		pt, _, _ := str(p, "type")
		switch pt {
		case "input_text", "text", "output_text":
			s, _, _ := str(p, "text")
			if len(s) > longest {
				longest, c.TextIndex = len(s), i
			}
			text.WriteString(s)
		case "input_audio":
			b64, ok, _ := str(p, "audio")
			if !ok {
				return nil, werr("missing_required_parameter", fmt.Sprintf("item.content[%d].audio", i), "missing base64 'audio'")
			}
			a, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				return nil, werr("bad_audio", fmt.Sprintf("item.content[%d].audio", i), "'audio' is not valid base64: %v", err)
			}
			c.Audio = append(c.Audio, a...)
		default:
			return nil, werr("invalid_value", fmt.Sprintf("item.content[%d].type", i), "unsupported content type %q", pt)
		}
	}
	c.Text = text.String()
	if c.Text == "" && len(c.Audio) == 0 {
		return nil, werr("missing_required_parameter", "item.content", "the item has no text or audio")
	}
	return c, nil
}

// flatSession is the session of a flat session.update (its fields beside the event's own, as
// vllm-omni's turn-based client sends them): the event's keys minus its own type and event_id,
// which are the event's, never the session's.
func flatSession(raw map[string]json.RawMessage) map[string]json.RawMessage {
	obj := make(map[string]json.RawMessage, len(raw))
	for k, v := range raw {
		if k != "type" && k != "event_id" {
			obj[k] = v
		}
	}
	return obj
}

// decodeFunctionCallItem reads a function_call item a client creates: a call the model made
// earlier, restored into the conversation (OpenAI accepts it; clients rebuild a conversation's
// history so). call_id and name are required; arguments is the JSON text of the call's
// arguments ("{}" when absent).
func decodeFunctionCallItem(c *ConversationItemCreate, it map[string]json.RawMessage, werr func(code, param, format string, a ...any) *Error) (ClientEvent, *Error) {
	c.ItemType = "function_call"
	callID, ok, e := str(it, "call_id")
	if e != nil || !ok || callID == "" {
		return nil, werr("missing_required_parameter", "item.call_id", "a function_call item needs a call_id (a string)")
	}
	name, ok, e := str(it, "name")
	if e != nil || !ok || name == "" {
		return nil, werr("missing_required_parameter", "item.name", "a function_call item needs the name of the function called")
	}
	args, ok, e := str(it, "arguments")
	if e != nil {
		return nil, werr("invalid_type", "item.arguments", "'item.arguments' must be a string: the call's arguments as JSON text")
	}
	if !ok || args == "" {
		args = "{}"
	}
	if !json.Valid([]byte(args)) {
		return nil, werr("invalid_value", "item.arguments", "'item.arguments' is not valid JSON")
	}
	c.CallID, c.Name, c.Arguments = callID, name, args
	return c, nil
}
