package protocol

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// The client side of the server events: DecodeServerEvent turns a frame into the same types
// the server encodes (talkclient, the benches and the end-to-end tests read them so).

// OtherEvent is a server event this package has no type for; Raw is the whole frame. It is
// for reading only: Encode refuses it.
type OtherEvent struct {
	Name string
	Raw  json.RawMessage
}

// EventType implements ServerEvent.
func (e OtherEvent) EventType() string { return e.Name }

// MarshalJSON refuses: an OtherEvent is never sent.
func (e OtherEvent) MarshalJSON() ([]byte, error) {
	return nil, fmt.Errorf("%s is not a typed server event", e.Name)
}

var serverDecoders = map[string]func([]byte) (ServerEvent, error){}

func register[T ServerEvent]() {
	var zero T
	dec := func(data []byte) (ServerEvent, error) {
		var v T
		err := json.Unmarshal(data, &v)
		return v, err
	}
	ga := zero.EventType()
	serverDecoders[ga] = dec
	if beta, keep := BetaEventName(ga); keep && beta != ga {
		serverDecoders[beta] = dec
	}
}

func init() {
	register[ResponseOutputAudioDelta]()
	register[ResponseOutputAudioTranscriptDelta]()
	register[ResponseOutputTextDelta]()
	register[ResponseCreated]()
	register[ResponseDone]()
	register[ResponseOutputItemAdded]()
	register[ResponseOutputItemDone]()
	register[ResponseContentPartAdded]()
	register[ResponseContentPartDone]()
	register[ResponseOutputAudioDone]()
	register[ResponseOutputAudioTranscriptDone]()
	register[ResponseOutputTextDone]()
	register[ResponseListen]()
	register[ResponseSpeak]()
	register[ResponseFunctionCallArgumentsDelta]()
	register[ResponseFunctionCallArgumentsDone]()
	register[OutputAudioBufferCleared]()
	register[OutputAudioBufferStarted]()
	register[OutputAudioBufferStopped]()
	register[RateLimitsUpdated]()
	register[ConversationItemAdded]()
	register[ConversationItemDone]()
	register[ConversationItemRetrieved]()
	register[ConversationItemDeleted]()
	register[ConversationItemTruncated]()
	register[TranscriptionCompleted]()
	register[TranscriptionDelta]()
	register[TranscriptionFailed]()
	register[InputAudioBufferCommitted]()
	register[InputAudioBufferCleared]()
	register[InputAudioBufferSpeechStarted]()
	register[InputAudioBufferSpeechStopped]()
	register[InputAudioBufferTimeoutTriggered]()
	register[PlaybackAcknowledged]()
	register[OverlapDecision]()
	register[ErrorEvent]()
	register[SessionResumed]()
	register[SessionClosing]()
	register[SessionClosed]()
	register[SessionHeartbeatAck]()
	register[MCPListToolsInProgress]()
	register[MCPListToolsCompleted]()
	register[MCPListToolsFailed]()
	register[ResponseMCPCallArgumentsDelta]()
	register[ResponseMCPCallArgumentsDone]()
	register[ResponseMCPCallInProgress]()
	register[ResponseMCPCallCompleted]()
	register[ResponseMCPCallFailed]()
	registerSessionEvent[SessionCreated]("created")
	registerSessionEvent[SessionUpdated]("updated")
}

// registerSessionEvent decodes session.<verb> and its transcription_session spelling into T,
// marked as a transcription session or not by the name it came under.
func registerSessionEvent[T interface {
	ServerEvent
	withTranscription(bool) ServerEvent
}](verb string) {
	for _, transcription := range []bool{false, true} {
		serverDecoders[sessionEventType(verb, transcription)] = func(data []byte) (ServerEvent, error) {
			var v T
			err := json.Unmarshal(data, &v)
			return v.withTranscription(transcription), err
		}
	}
}

// DecodeServerEvent decodes one server frame, in either dialect, into its envelope and its
// payload: the protocol type of its event type, or an OtherEvent. A beta frame decodes into the
// GA type; fields only the beta spelling has (modalities, output_audio_format, ...) are not
// kept.
func DecodeServerEvent(data []byte) (ServerEvent, Envelope, error) {
	var env struct {
		Type    string          `json:"type"`
		EventID string          `json:"event_id"`
		Seq     json.RawMessage `json:"server_event_seq"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, Envelope{}, fmt.Errorf("decoding a server event: %w", err)
	}
	e := Envelope{Type: env.Type, EventID: env.EventID}
	if len(env.Seq) > 0 {
		n, err := strconv.ParseInt(string(env.Seq), 10, 64)
		if err != nil {
			return nil, e, fmt.Errorf("decoding %s: server_event_seq %s", env.Type, env.Seq)
		}
		e.Seq = n
	}
	dec, ok := serverDecoders[env.Type]
	if !ok {
		return OtherEvent{Name: env.Type, Raw: append(json.RawMessage(nil), data...)}, e, nil
	}
	ev, err := dec(data)
	if err != nil {
		return nil, e, fmt.Errorf("decoding %s: %w", env.Type, err)
	}
	return ev, e, nil
}

// UnmarshalJSON reads a part written by MarshalJSON.
func (p *ContentPart) UnmarshalJSON(data []byte) error {
	var w struct {
		Type       string  `json:"type"`
		Text       string  `json:"text"`
		Transcript *string `json:"transcript"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*p = ContentPart{Type: w.Type, Text: w.Text}
	if w.Transcript != nil {
		p.Transcript = *w.Transcript
	} else if p.Type == "input_audio" {
		p.TranscriptNull = true
	}
	return nil
}

// UnmarshalJSON reads a count or "inf" (0).
func (m *MaxTokens) UnmarshalJSON(data []byte) error {
	if string(data) == `"inf"` || string(data) == "null" {
		*m = 0
		return nil
	}
	var n int
	if err := json.Unmarshal(data, &n); err != nil {
		return fmt.Errorf("max_output_tokens: %w", err)
	}
	*m = MaxTokens(n)
	return nil
}

// UnmarshalJSON reads a turn_detection object written by MarshalJSON.
func (td *TurnDetectionObject) UnmarshalJSON(data []byte) error {
	var w struct {
		Type              string  `json:"type"`
		Threshold         float64 `json:"threshold"`
		PrefixPaddingMs   int     `json:"prefix_padding_ms"`
		SilenceDurationMs int     `json:"silence_duration_ms"`
		IdleTimeoutMs     *int    `json:"idle_timeout_ms"`
		CreateResponse    *bool   `json:"create_response"`
		InterruptResponse *bool   `json:"interrupt_response"`
		Eagerness         string  `json:"eagerness"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*td = TurnDetectionObject{Type: w.Type, Threshold: w.Threshold, PrefixPaddingMs: w.PrefixPaddingMs,
		SilenceDurationMs: w.SilenceDurationMs, Eagerness: w.Eagerness, NoResponse: w.CreateResponse == nil}
	if w.IdleTimeoutMs != nil {
		td.IdleTimeoutMs = *w.IdleTimeoutMs
	}
	if w.CreateResponse != nil {
		td.CreateResponse = *w.CreateResponse
	}
	if w.InterruptResponse != nil {
		td.InterruptResponse = *w.InterruptResponse
	}
	return nil
}

// decodeSessionObject reads a session object: a transcription session by its object, else a
// realtime session (a beta object fills the fields both spellings share).
func decodeSessionObject(data json.RawMessage) (SessionObject, error) {
	if len(data) == 0 || string(data) == "null" {
		return nil, nil
	}
	var probe struct {
		Object string `json:"object"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, err
	}
	if probe.Object == "realtime.transcription_session" {
		var s TranscriptionSession
		return &s, json.Unmarshal(data, &s)
	}
	var s Session
	return &s, json.Unmarshal(data, &s)
}

// UnmarshalJSON reads the event with its session object.
func (e *SessionCreated) UnmarshalJSON(data []byte) error {
	var w struct {
		ResumeToken string          `json:"resume_token"`
		Session     json.RawMessage `json:"session"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	s, err := decodeSessionObject(w.Session)
	*e = SessionCreated{ResumeToken: w.ResumeToken, Session: s}
	return err
}

// UnmarshalJSON reads the event with its session object.
func (e *SessionUpdated) UnmarshalJSON(data []byte) error {
	var w struct {
		Session json.RawMessage `json:"session"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	s, err := decodeSessionObject(w.Session)
	*e = SessionUpdated{Session: s}
	return err
}

// UnmarshalJSON reads the event with its session object.
func (e *SessionResumed) UnmarshalJSON(data []byte) error {
	type plain SessionResumed
	var w struct {
		plain
		Session json.RawMessage `json:"session"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	s, err := decodeSessionObject(w.Session)
	*e = SessionResumed(w.plain)
	e.Session = s
	return err
}

// UnmarshalJSON reads an item; one of a type this package does not type (the MCP items) keeps
// its whole object in Open, so that it re-encodes as it came.
func (it *Item) UnmarshalJSON(data []byte) error {
	type plain Item
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*it = Item(p)
	switch it.Type {
	case "message", "function_call", "function_call_output":
		return nil
	}
	return json.Unmarshal(data, &it.Open)
}
