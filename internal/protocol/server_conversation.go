package protocol

// The conversation.item.* and input_audio_buffer.* events.

// ConversationItemAdded is conversation.item.added (beta: conversation.item.created).
type ConversationItemAdded struct {
	Item Item `json:"item"`
	// PreviousItemID is null for the first item.
	PreviousItemID *string `json:"previous_item_id"`
}

// EventType implements ServerEvent.
func (ConversationItemAdded) EventType() string { return "conversation.item.added" }

func (e ConversationItemAdded) betaSpelling() ServerEvent { e.Item = betaItem(e.Item); return e }

// ConversationItemDone is conversation.item.done (GA only).
type ConversationItemDone struct {
	Item           Item    `json:"item"`
	PreviousItemID *string `json:"previous_item_id"`
}

// EventType implements ServerEvent.
func (ConversationItemDone) EventType() string { return "conversation.item.done" }

func (e ConversationItemDone) betaSpelling() ServerEvent { e.Item = betaItem(e.Item); return e }

// ConversationItemRetrieved is conversation.item.retrieved.
type ConversationItemRetrieved struct {
	Item Item `json:"item"`
}

// EventType implements ServerEvent.
func (ConversationItemRetrieved) EventType() string { return "conversation.item.retrieved" }

func (e ConversationItemRetrieved) betaSpelling() ServerEvent { e.Item = betaItem(e.Item); return e }

// ConversationItemDeleted is conversation.item.deleted. Reason is an extension, set when the
// server dropped the item itself (history_budget: the conversation outgrew its byte budget).
type ConversationItemDeleted struct {
	ItemID string `json:"item_id"`
	Reason string `json:"reason,omitempty"`
}

// EventType implements ServerEvent.
func (ConversationItemDeleted) EventType() string { return "conversation.item.deleted" }

// ConversationItemTruncated is conversation.item.truncated.
type ConversationItemTruncated struct {
	AudioEndMs   int    `json:"audio_end_ms"`
	ContentIndex int    `json:"content_index"`
	ItemID       string `json:"item_id"`
}

// EventType implements ServerEvent.
func (ConversationItemTruncated) EventType() string { return "conversation.item.truncated" }

// TranscriptionCompleted is conversation.item.input_audio_transcription.completed. Usage is
// nil when the item is gone (it was deleted while it was transcribed). Logprobs is there only
// when the session's include asks for them (nil: the key is left out, also for an item whose
// audio was committed before include asked): one token per word, as POST
// /v1/audio/transcriptions gives them.
type TranscriptionCompleted struct {
	ContentIndex int                  `json:"content_index"`
	ItemID       string               `json:"item_id"`
	Logprobs     *[]TranscriptLogprob `json:"logprobs,omitempty"`
	Transcript   string               `json:"transcript"`
	Usage        *TranscriptionUsage  `json:"usage,omitempty"`
}

// TranscriptionUsage is a transcription's usage: the seconds of audio transcribed.
type TranscriptionUsage struct {
	Seconds float64 `json:"seconds"`
	Type    string  `json:"type"`
}

// EventType implements ServerEvent.
func (TranscriptionCompleted) EventType() string {
	return "conversation.item.input_audio_transcription.completed"
}

// TranscriptionDelta is conversation.item.input_audio_transcription.delta.
type TranscriptionDelta struct {
	ContentIndex int    `json:"content_index"`
	Delta        string `json:"delta"`
	ItemID       string `json:"item_id"`
}

// EventType implements ServerEvent.
func (TranscriptionDelta) EventType() string {
	return "conversation.item.input_audio_transcription.delta"
}

func (e TranscriptionDelta) wireSize() int { return 100 + len(e.Delta) + len(e.ItemID) }

// TranscriptionFailed is conversation.item.input_audio_transcription.failed.
type TranscriptionFailed struct {
	ContentIndex int                `json:"content_index"`
	Error        TranscriptionError `json:"error"`
	ItemID       string             `json:"item_id"`
}

// TranscriptionError is why an item was not transcribed (it answers no client event, so it
// has no event_id; param is always null).
type TranscriptionError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Type    string  `json:"type"`
}

// EventType implements ServerEvent.
func (TranscriptionFailed) EventType() string {
	return "conversation.item.input_audio_transcription.failed"
}

// InputAudioBufferCommitted is input_audio_buffer.committed.
type InputAudioBufferCommitted struct {
	ItemID         string  `json:"item_id"`
	PreviousItemID *string `json:"previous_item_id"`
}

// EventType implements ServerEvent.
func (InputAudioBufferCommitted) EventType() string { return "input_audio_buffer.committed" }

// InputAudioBufferCleared is input_audio_buffer.cleared.
type InputAudioBufferCleared struct{}

// EventType implements ServerEvent.
func (InputAudioBufferCleared) EventType() string { return "input_audio_buffer.cleared" }

// InputAudioBufferSpeechStarted is input_audio_buffer.speech_started.
type InputAudioBufferSpeechStarted struct {
	AudioStartMs int    `json:"audio_start_ms"`
	ItemID       string `json:"item_id"`
}

// EventType implements ServerEvent.
func (InputAudioBufferSpeechStarted) EventType() string { return "input_audio_buffer.speech_started" }

// InputAudioBufferSpeechStopped is input_audio_buffer.speech_stopped.
type InputAudioBufferSpeechStopped struct {
	AudioEndMs int `json:"audio_end_ms"`
	// EndOfTurn is omniserve's extension under semantic_vad: why the pause ended the turn.
	EndOfTurn *EndOfTurnInfo `json:"end_of_turn,omitempty"`
	ItemID    string         `json:"item_id"`
}

// EndOfTurnInfo is semantic_vad's decision on a speech_stopped (an omniserve extension field).
type EndOfTurnInfo struct {
	// Probability is the thinker's estimate for the pause; absent without one.
	Probability *float64 `json:"probability,omitempty"`
	// Reason: "semantic" (the thinker's end-of-turn probability reached the eagerness's
	// threshold), "max_wait" (the pause reached the eagerness's maximum wait), or "silence"
	// (no estimate: silence alone decided, with the reason in the server log).
	Reason string `json:"reason"`
	// SilenceMs is the pause at the decision, in input audio.
	SilenceMs int `json:"silence_ms"`
}

// EventType implements ServerEvent.
func (InputAudioBufferSpeechStopped) EventType() string { return "input_audio_buffer.speech_stopped" }

// InputAudioBufferTimeoutTriggered is input_audio_buffer.timeout_triggered: the user stayed
// silent for turn_detection.idle_timeout_ms.
type InputAudioBufferTimeoutTriggered struct {
	AudioEndMs   int    `json:"audio_end_ms"`
	AudioStartMs int    `json:"audio_start_ms"`
	ItemID       string `json:"item_id"`
}

// EventType implements ServerEvent.
func (InputAudioBufferTimeoutTriggered) EventType() string {
	return "input_audio_buffer.timeout_triggered"
}

// PlaybackAcknowledged is playback.acknowledged, an extension: the answer to playback.ack.
type PlaybackAcknowledged struct {
	ItemID     string `json:"item_id"`
	PlayedMs   int    `json:"played_ms"`
	ResponseID string `json:"response_id"`
	SentMs     int    `json:"sent_ms"`
}

// EventType implements ServerEvent.
func (PlaybackAcknowledged) EventType() string { return "playback.acknowledged" }

// OverlapDecision is overlap.decision, an extension: what the server did about the user
// speaking over a response.
type OverlapDecision struct {
	Action    string `json:"action"`
	Epoch     int    `json:"epoch"`
	Policy    string `json:"policy"`
	Reason    string `json:"reason"`
	SessionID string `json:"session_id"`
}

// EventType implements ServerEvent.
func (OverlapDecision) EventType() string { return "overlap.decision" }

// TranscriptLogprob is OpenAI's transcription logprob entry (LogProbProperties): a token (here
// a transcript word with the space before it, so the tokens concatenate to the transcript), its
// log probability, and its UTF-8 bytes as numbers. The session fills it from the recognizer's
// word posteriors (audio.TranscriptTokens, the same fields).
type TranscriptLogprob struct {
	Bytes   []int   `json:"bytes"`
	Logprob float64 `json:"logprob"`
	Token   string  `json:"token"`
}
