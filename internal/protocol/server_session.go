package protocol

import "strconv"

// The session.* events and the session objects they carry.

// SessionObject is the session object of session.created / session.updated /
// session.resumed: a *Session (realtime.session) or a *TranscriptionSession.
type SessionObject interface {
	// betaObject is the object in beta spelling.
	betaObject() SessionObject
}

// Session is the effective realtime.session in GA shape, plus the omniserve extensions
// (duplex, state, capabilities, ...) that strict clients ignore. Temperature is not part of
// the GA object; the beta object (input_audio_format, modalities, ...) writes it.
type Session struct {
	Audio        SessionAudio `json:"audio"`
	AutoResponse bool         `json:"auto_response"`
	Capabilities Capabilities `json:"capabilities"`
	Duplex       bool         `json:"duplex"`
	Epoch        int          `json:"epoch"`
	ExpiresAt    int64        `json:"expires_at"`
	ExtraBody    ExtraBody    `json:"extra_body"`
	// ID is left out only where no session exists yet (a client secret's preview).
	ID           string  `json:"id,omitempty"`
	IdleTimeoutS float64 `json:"idle_timeout_s"`
	// Include is ["item.input_audio_transcription.logprobs"] while the session gives them,
	// else null; Prompt is always null: omniserve has no stored prompts.
	Include          *[]string `json:"include"`
	Instructions     string    `json:"instructions"`
	MaxOutputTokens  MaxTokens `json:"max_output_tokens"`
	Model            string    `json:"model"`
	Object           string    `json:"object"`
	OutputModalities []string  `json:"output_modalities"`
	OverlapPolicy    string    `json:"overlap_policy"`
	Prompt           *string   `json:"prompt"`
	State            string    `json:"state"`
	// ToolChoice is "auto" / "none" / "required" or {type: function, name}, and Tools the tool
	// definitions, as the session's tool code builds them (maps: a function's parameters are
	// the client's JSON schema, kept as written).
	ToolChoice any   `json:"tool_choice"`
	Tools      []any `json:"tools"`
	// Tracing is session.tracing as the client set it (null, "auto" or its object), echoed.
	Tracing     any        `json:"tracing"`
	Truncation  Truncation `json:"truncation"`
	Turn        int        `json:"turn"`
	TurnState   string     `json:"turn_state"`
	Type        string     `json:"type"`
	Temperature float64    `json:"-"`
}

// SessionAudio is a session's audio object.
type SessionAudio struct {
	Input  AudioInput   `json:"input"`
	Output *AudioOutput `json:"output,omitempty"` // a transcription session has none
}

// AudioInput is the input side of a session's audio. SampleRateHz is an extension: the rate
// of the input format (which the beta format string cannot carry).
type AudioInput struct {
	Format         FormatSpec           `json:"format"`
	NoiseReduction *NoiseReduction      `json:"noise_reduction"`
	SampleRateHz   int                  `json:"sample_rate_hz"`
	Transcription  *Transcription       `json:"transcription"`
	TurnDetection  *TurnDetectionObject `json:"turn_detection"`
}

// NoiseReduction is audio.input.noise_reduction (near_field | far_field).
type NoiseReduction struct {
	Type string `json:"type"`
}

// Transcription is audio.input.transcription.
type Transcription struct {
	Language string `json:"language"`
	Model    string `json:"model"`
	Prompt   string `json:"prompt"`
}

// TurnDetectionObject is the effective turn_detection of a session. A server_vad object has
// the VAD's threshold, padding, silence and idle timeout (0: null); a semantic_vad object its
// eagerness. A transcription session's object leaves create_response and interrupt_response
// out (NoResponse): it never responds.
type TurnDetectionObject struct {
	Type              string
	Threshold         float64
	PrefixPaddingMs   int
	SilenceDurationMs int
	IdleTimeoutMs     int
	CreateResponse    bool
	InterruptResponse bool
	Eagerness         string
	NoResponse        bool
}

// MarshalJSON writes the keys of the object's type, sorted.
func (td TurnDetectionObject) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 192)
	b = append(b, '{')
	if !td.NoResponse {
		b = append(b, `"create_response":`...)
		b = strconv.AppendBool(b, td.CreateResponse)
		b = append(b, ',')
	}
	if td.Type == "semantic_vad" {
		b = append(b, `"eagerness":`...)
		b = appendString(b, td.Eagerness)
		b = append(b, ',')
	} else {
		b = append(b, `"idle_timeout_ms":`...)
		if td.IdleTimeoutMs > 0 {
			b = strconv.AppendInt(b, int64(td.IdleTimeoutMs), 10)
		} else {
			b = append(b, "null"...)
		}
		b = append(b, ',')
	}
	if !td.NoResponse {
		b = append(b, `"interrupt_response":`...)
		b = strconv.AppendBool(b, td.InterruptResponse)
		b = append(b, ',')
	}
	if td.Type != "semantic_vad" {
		b = append(b, `"prefix_padding_ms":`...)
		b = strconv.AppendInt(b, int64(td.PrefixPaddingMs), 10)
		b = append(b, `,"silence_duration_ms":`...)
		b = strconv.AppendInt(b, int64(td.SilenceDurationMs), 10)
		b = append(b, `,"threshold":`...)
		f, err := marshalFloat(td.Threshold)
		if err != nil {
			return nil, err
		}
		b = append(b, f...)
		b = append(b, ',')
	}
	b = append(b, `"type":`...)
	b = appendString(b, td.Type)
	return append(b, '}'), nil
}

// Capabilities is the session's capabilities extension: what this server supports.
type Capabilities struct {
	BargeInMinSpeechMs     int   `json:"barge_in_min_speech_ms"`
	BargeInPitchedSpeechMs int   `json:"barge_in_pitched_speech_ms"`
	ChunkPeriodMs          int   `json:"chunk_period_ms"`
	FullDuplex             bool  `json:"full_duplex"`
	MaxOutputLeadMs        int64 `json:"max_output_lead_ms"`
	SupportsAudioTruncate  bool  `json:"supports_audio_truncate"`
	SupportsBargeIn        bool  `json:"supports_barge_in"`
	SupportsSessionResume  bool  `json:"supports_session_resume"`
	TargetBargeInLatencyMs int   `json:"target_barge_in_latency_ms"`
}

// ExtraBody is the session's extra_body extension. Seed is null when responses draw random
// seeds.
type ExtraBody struct {
	AutoResponse bool    `json:"auto_response"`
	Seed         *uint32 `json:"seed"`
}

// betaSession is Session in beta spelling (OpenAI-Beta: realtime=v1).
type betaSession struct {
	Audio                    betaSessionAudio     `json:"audio"`
	AutoResponse             bool                 `json:"auto_response"`
	Capabilities             Capabilities         `json:"capabilities"`
	Duplex                   bool                 `json:"duplex"`
	Epoch                    int                  `json:"epoch"`
	ExpiresAt                int64                `json:"expires_at"`
	ExtraBody                ExtraBody            `json:"extra_body"`
	ID                       string               `json:"id"`
	IdleTimeoutS             float64              `json:"idle_timeout_s"`
	InputAudioFormat         string               `json:"input_audio_format"`
	InputAudioNoiseReduction *NoiseReduction      `json:"input_audio_noise_reduction"`
	InputAudioTranscription  *Transcription       `json:"input_audio_transcription"`
	Instructions             string               `json:"instructions"`
	MaxResponseOutputTokens  MaxTokens            `json:"max_response_output_tokens"`
	Modalities               []string             `json:"modalities"`
	Model                    string               `json:"model"`
	Object                   string               `json:"object"`
	OutputAudioFormat        string               `json:"output_audio_format"`
	OverlapPolicy            string               `json:"overlap_policy"`
	Speed                    float64              `json:"speed"`
	State                    string               `json:"state"`
	Temperature              float64              `json:"temperature"`
	ToolChoice               any                  `json:"tool_choice"`
	Tools                    []any                `json:"tools"`
	Turn                     int                  `json:"turn"`
	TurnDetection            *TurnDetectionObject `json:"turn_detection"`
	TurnState                string               `json:"turn_state"`
	Voice                    string               `json:"voice"`
}

// betaSessionAudio keeps the input rate, which the beta format string cannot carry.
type betaSessionAudio struct {
	Input betaAudioInput `json:"input"`
}

type betaAudioInput struct {
	SampleRateHz int `json:"sample_rate_hz"`
}

func (betaSession) betaObject() SessionObject { return nil }

func (s *Session) betaObject() SessionObject {
	in := s.Audio.Input
	b := betaSession{Audio: betaSessionAudio{Input: betaAudioInput{SampleRateHz: in.SampleRateHz}},
		AutoResponse: s.AutoResponse, Capabilities: s.Capabilities, Duplex: s.Duplex, Epoch: s.Epoch,
		ExpiresAt: s.ExpiresAt, ExtraBody: s.ExtraBody, ID: s.ID, IdleTimeoutS: s.IdleTimeoutS,
		InputAudioFormat: in.Format.BetaName(), InputAudioNoiseReduction: in.NoiseReduction,
		InputAudioTranscription: in.Transcription, Instructions: s.Instructions,
		MaxResponseOutputTokens: s.MaxOutputTokens, Modalities: betaModalities(s.OutputModalities),
		Model: s.Model, Object: s.Object, OverlapPolicy: s.OverlapPolicy, Speed: 1, State: s.State,
		Temperature: s.Temperature, ToolChoice: s.ToolChoice, Tools: s.Tools, Turn: s.Turn,
		TurnDetection: in.TurnDetection, TurnState: s.TurnState}
	if out := s.Audio.Output; out != nil {
		b.OutputAudioFormat, b.Voice = out.Format.BetaName(), out.Voice
		if out.Speed != nil {
			b.Speed = *out.Speed
		}
	}
	return b
}

// betaModalities is the beta view of output_modalities: audio comes with its text.
func betaModalities(ga []string) []string {
	for _, m := range ga {
		if m == "audio" {
			return []string{"text", "audio"}
		}
	}
	return []string{"text"}
}

// TranscriptionSession is the effective realtime.transcription_session (?intent=transcription)
// in GA shape, plus the omniserve extensions a client may need (resume, idle timeout).
type TranscriptionSession struct {
	Audio        SessionAudio              `json:"audio"`
	Capabilities TranscriptionCapabilities `json:"capabilities"`
	ExpiresAt    int64                     `json:"expires_at"`
	// ID is left out only where no session exists yet (a client secret's preview).
	ID           string    `json:"id,omitempty"`
	IdleTimeoutS float64   `json:"idle_timeout_s"`
	Include      *[]string `json:"include"`
	Object       string    `json:"object"`
	State        string    `json:"state"`
	Type         string    `json:"type"`
}

// TranscriptionCapabilities is a transcription session's capabilities extension.
type TranscriptionCapabilities struct {
	SupportsSessionResume bool `json:"supports_session_resume"`
}

type betaTranscriptionSession struct {
	Capabilities             TranscriptionCapabilities `json:"capabilities"`
	ExpiresAt                int64                     `json:"expires_at"`
	ID                       string                    `json:"id"`
	IdleTimeoutS             float64                   `json:"idle_timeout_s"`
	Include                  *[]string                 `json:"include"`
	InputAudioFormat         string                    `json:"input_audio_format"`
	InputAudioNoiseReduction *NoiseReduction           `json:"input_audio_noise_reduction"`
	InputAudioTranscription  *Transcription            `json:"input_audio_transcription"`
	Modalities               []string                  `json:"modalities"`
	Object                   string                    `json:"object"`
	State                    string                    `json:"state"`
	TurnDetection            *TurnDetectionObject      `json:"turn_detection"`
}

func (betaTranscriptionSession) betaObject() SessionObject { return nil }

func (s *TranscriptionSession) betaObject() SessionObject {
	in := s.Audio.Input
	return betaTranscriptionSession{Capabilities: s.Capabilities, ExpiresAt: s.ExpiresAt, ID: s.ID,
		IdleTimeoutS: s.IdleTimeoutS, Include: s.Include, InputAudioFormat: in.Format.BetaName(),
		InputAudioNoiseReduction: in.NoiseReduction, InputAudioTranscription: in.Transcription,
		Modalities: []string{"text"}, Object: s.Object, State: s.State, TurnDetection: in.TurnDetection}
}

func betaObject(o SessionObject) SessionObject {
	if o == nil {
		return nil
	}
	if b := o.betaObject(); b != nil {
		return b
	}
	return o
}

// SessionCreated is session.created (transcription_session.created for a beta transcription
// session: Transcription). ResumeToken is an extension: the bearer secret of session.resume,
// on a resumable session.
type SessionCreated struct {
	ResumeToken   string        `json:"resume_token,omitempty"`
	Session       SessionObject `json:"session"`
	Transcription bool          `json:"-"`
}

// EventType implements ServerEvent.
func (e SessionCreated) EventType() string { return sessionEventType("created", e.Transcription) }

func (e SessionCreated) betaSpelling() ServerEvent { e.Session = betaObject(e.Session); return e }

func (e SessionCreated) withTranscription(t bool) ServerEvent { e.Transcription = t; return e }

// SessionUpdated is session.updated (transcription_session.updated: Transcription).
type SessionUpdated struct {
	Session       SessionObject `json:"session"`
	Transcription bool          `json:"-"`
}

// EventType implements ServerEvent.
func (e SessionUpdated) EventType() string { return sessionEventType("updated", e.Transcription) }

func (e SessionUpdated) betaSpelling() ServerEvent { e.Session = betaObject(e.Session); return e }

func (e SessionUpdated) withTranscription(t bool) ServerEvent { e.Transcription = t; return e }

// sessionEventType names a session event (verb created or updated): session.<verb>, or
// transcription_session.<verb> for a beta transcription session.
func sessionEventType(verb string, transcription bool) string {
	if transcription {
		return "transcription_session." + verb
	}
	return "session." + verb
}

// SessionResumed is session.resumed, an extension: a connection took over a session (resume).
// The session fills the session, its token and, when the replay is incomplete
// (ResyncRequired), the conversation's Items and the open Response; the transport fills the
// event numbers it replays.
type SessionResumed struct {
	Items                      *[]Item       `json:"items,omitempty"`
	LastReceivedServerEventSeq int64         `json:"last_received_server_event_seq"`
	LastServerEventSeq         int64         `json:"last_server_event_seq"`
	ReplayedEvents             int           `json:"replayed_events"`
	Response                   *Response     `json:"response,omitempty"`
	ResumeToken                string        `json:"resume_token"`
	ResyncRequired             bool          `json:"resync_required"`
	Session                    SessionObject `json:"session"`
	SessionID                  string        `json:"session_id"`
}

// EventType implements ServerEvent.
func (SessionResumed) EventType() string { return "session.resumed" }

// betaSpelling spells the session, the items and the response beta; the event keeps its GA
// name in both dialects.
func (e SessionResumed) betaSpelling() ServerEvent {
	e.Session = betaObject(e.Session)
	if e.Items != nil {
		items := betaItems(*e.Items)
		e.Items = &items
	}
	if e.Response != nil {
		r := *e.Response
		b := r.beta()
		return betaSessionResumed{Items: e.Items, LastReceivedServerEventSeq: e.LastReceivedServerEventSeq,
			LastServerEventSeq: e.LastServerEventSeq, ReplayedEvents: e.ReplayedEvents, Response: &b,
			ResumeToken: e.ResumeToken, ResyncRequired: e.ResyncRequired, Session: e.Session, SessionID: e.SessionID}
	}
	return e
}

type betaSessionResumed struct {
	Items                      *[]Item       `json:"items,omitempty"`
	LastReceivedServerEventSeq int64         `json:"last_received_server_event_seq"`
	LastServerEventSeq         int64         `json:"last_server_event_seq"`
	ReplayedEvents             int           `json:"replayed_events"`
	Response                   *betaResponse `json:"response,omitempty"`
	ResumeToken                string        `json:"resume_token"`
	ResyncRequired             bool          `json:"resync_required"`
	Session                    SessionObject `json:"session"`
	SessionID                  string        `json:"session_id"`
}

func (betaSessionResumed) EventType() string { return "session.resumed" }

// SessionClosing is session.closing, an extension: the server drains; the session ends after
// GraceMs.
type SessionClosing struct {
	GraceMs   int64  `json:"grace_ms"`
	Reason    string `json:"reason"`
	SessionID string `json:"session_id"`
}

// EventType implements ServerEvent.
func (SessionClosing) EventType() string { return "session.closing" }

// SessionClosed is session.closed, an extension: why the session ended.
type SessionClosed struct {
	Reason    string `json:"reason"`
	SessionID string `json:"session_id"`
}

// EventType implements ServerEvent.
func (SessionClosed) EventType() string { return "session.closed" }

// SessionHeartbeatAck is session.heartbeat_ack, an extension: the answer to session.heartbeat.
type SessionHeartbeatAck struct {
	SessionID string `json:"session_id"`
}

// EventType implements ServerEvent.
func (SessionHeartbeatAck) EventType() string { return "session.heartbeat_ack" }
