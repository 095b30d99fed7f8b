package protocol

// ClientEvent is one decoded client event.
type ClientEvent interface {
	// EventID is the client's event_id ("" when it sent none).
	EventID() string
	// Type is the event type as the client wrote it (turn.signal keeps its own name).
	Type() string
}

// Header carries the fields every client event shares.
type Header struct {
	ID   string
	Kind string
}

// EventID implements ClientEvent.
func (h Header) EventID() string { return h.ID }

// Type implements ClientEvent.
func (h Header) Type() string { return h.Kind }

// AudioFormat is an audio format: pcm16 | pcm_f32le | g711_ulaw | g711_alaw, and a rate in Hz
// (0: the format's default).
type AudioFormat struct {
	Type string
	Rate int
}

// TurnDetection is a turn_detection object; nil fields were absent.
type TurnDetection struct {
	Type              *string
	Threshold         *float64
	PrefixPaddingMs   *int
	SilenceDurationMs *int
	IdleTimeoutMs     *int // nil = null
	CreateResponse    *bool
	InterruptResponse *bool
	Eagerness         *string
}

// SessionPatch is the session object of session.update, in either dialect; nil fields were
// absent.
type SessionPatch struct {
	Model            *string
	Modalities       []string // output_modalities (GA) or modalities (beta)
	Instructions     *string
	Voice            *string
	InputFormat      *AudioFormat
	OutputFormat     *AudioFormat
	TurnDetectionSet bool           // the key was present
	TurnDetection    *TurnDetection // nil with TurnDetectionSet = null
	TranscriptionSet bool           // audio.input.transcription (or input_audio_transcription) was present
	Transcription    bool           // it was an object (not null)
	// ToolsSet: tools was present (an array; empty clears them); ToolChoice is tool_choice.
	ToolsSet   bool
	Tools      []Tool
	ToolChoice *ToolChoice
	// MCPTools are the `type: "mcp"` entries of tools (mcp.go), in their order.
	MCPTools []MCPTool
	// NoiseReductionSet: audio.input.noise_reduction (or input_audio_noise_reduction) was
	// present; NoiseReduction is its type ("near_field" or "far_field"), "" for null.
	NoiseReductionSet bool
	NoiseReduction    string
	Type              *string // GA session.type
	IdleTimeoutS      *float64
	AutoResponse      *bool // extra_body.auto_response / full_duplex
	MaxOutputTokens   *int  // 0 = unlimited ("inf")
	Temperature       *float64
	Seed              *uint32 // extra_body.seed
	// Tracing is session.tracing when present: TracingSet, and Tracing nil (null), "auto" or
	// the tracing configuration object (workflow_name, group_id, metadata).
	TracingSet bool
	Tracing    any
	// TranscriptLogprobs is session.include when present: whether it names
	// item.input_audio_transcription.logprobs (IncludeLogprobs).
	TranscriptLogprobs *bool
	// Truncation is session.truncation when present and not null.
	Truncation *Truncation
}

// InputItem is one entry of response.create's input: a text message (Role, Text) or a
// reference to a conversation item (Ref).
type InputItem struct {
	Role, Text string
	Ref        string
}

// SessionUpdate is session.update.
type SessionUpdate struct {
	Header
	Session SessionPatch
	// BetaSpelling: the session object uses beta-only spellings and no GA-only field; as a
	// connection's first event it marks a beta client that sent no OpenAI-Beta header.
	BetaSpelling bool
	// Transcription: the event was the legacy transcription_session.update (its reply is
	// transcription_session.updated); the session object is read as session.update's.
	Transcription bool
}

// InputAudioBufferAppend is input_audio_buffer.append; Audio is the decoded base64 payload.
// Format (the extensions format and sample_rate_hz) overrides the session's input format for
// this chunk when non-nil.
type InputAudioBufferAppend struct {
	Header
	Audio  []byte
	Format *AudioFormat
}

// InputAudioBufferCommit is input_audio_buffer.commit; ResponseCreate is the extension
// response_create (nil: absent).
type InputAudioBufferCommit struct {
	Header
	ResponseCreate *bool
}

// InputAudioBufferClear is input_audio_buffer.clear.
type InputAudioBufferClear struct{ Header }

// ResponseCreate is response.create.
type ResponseCreate struct {
	Header
	MaxOutputTokens *int
	Modalities      []string
	OutputFormat    *AudioFormat
	Metadata        map[string]string
	Instructions    *string // nil = the session's
	Conversation    string  // "none" for an out-of-band response, "" for the default one
	Input           []InputItem
	// ToolsSet: tools was present (the response's own tools replace the session's);
	// ToolChoice and ParallelToolCalls override the session's for this response.
	ToolsSet          bool
	Tools             []Tool
	ToolChoice        *ToolChoice
	ParallelToolCalls *bool
	// Unsupported names a per-response option omniserve refuses ("" when none), as its param.
	Unsupported string
}

// ResponseCancel is response.cancel (or turn.signal {event: response.cancel}).
type ResponseCancel struct {
	Header
	ResponseID string
}

// ConversationItemCreate is conversation.item.create with a message item.
type ConversationItemCreate struct {
	Header
	ItemID         string
	PreviousItemID string // "" = append, "root" = first
	// ItemType is "" or "message", "function_call" with CallID, Name and Arguments (a call
	// restored into the conversation), "function_call_output" with CallID and Output, or
	// "mcp_approval_response" with ApprovalRequestID, Approve and Reason.
	ItemType          string
	CallID, Output    string
	Name, Arguments   string
	ApprovalRequestID string
	Approve           bool
	Reason            string
	Role              string
	Text              string // the text parts, concatenated
	TextIndex         int    // the index in content of the longest text part (the one an error about the text names)
	Audio             []byte // the input_audio parts, decoded and concatenated
}

// ConversationItemDelete is conversation.item.delete.
type ConversationItemDelete struct {
	Header
	ItemID string
}

// ConversationItemRetrieve is conversation.item.retrieve.
type ConversationItemRetrieve struct {
	Header
	ItemID string
}

// ConversationItemTruncate is conversation.item.truncate.
type ConversationItemTruncate struct {
	Header
	ItemID       string
	ContentIndex int
	AudioEndMs   int
}

// OutputAudioBufferClear is output_audio_buffer.clear.
type OutputAudioBufferClear struct {
	Header
	ResponseID string
}

// InputCancel is the duplex extension input.cancel (or turn.signal {event: input.cancel}).
type InputCancel struct{ Header }

// BargeIn is the duplex extension barge_in (or turn.signal {event: barge_in}).
type BargeIn struct{ Header }

// SessionClose is the extension session.close.
type SessionClose struct{ Header }

// SessionHeartbeat is the extension session.heartbeat.
type SessionHeartbeat struct{ Header }

// SessionResume is the extension session.resume, the first event of a connection that takes
// over a session after a disconnect.
type SessionResume struct {
	Header
	SessionID string
	Token     string
	// LastSeq is the client's last received server_event_seq (0: none).
	LastSeq int64
}

// SessionEventAck is the extension session.event_ack: the client received every server event
// up to Seq (server_event_seq). It is consumed by the connection and never answered, not even
// when it is invalid: Problem then says why ("" when valid), and the connection counts it.
type SessionEventAck struct {
	Header
	Seq     int64
	Problem string
}

// PlaybackAck is the duplex extension playback.ack: the client's playback cursor.
type PlaybackAck struct {
	Header
	PlayedMs   int
	ResponseID string
	ItemID     string
	Truncate   bool
}
