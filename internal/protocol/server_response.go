package protocol

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// The response.* events: one response's lifecycle and its model output.

// ResponseOutputAudioDelta is response.output_audio.delta (beta: response.audio.delta), one
// chunk of a response's audio. Format, SampleRateHz and AudioDurationMs are omniserve
// extensions that tell the chunk's encoding and length (docs/REALTIME.md).
type ResponseOutputAudioDelta struct {
	AudioDurationMs float64 `json:"audio_duration_ms"`
	ContentIndex    int     `json:"content_index"`
	// Delta is the audio, base64.
	Delta        string `json:"delta"`
	Format       string `json:"format"`
	ItemID       string `json:"item_id"`
	OutputIndex  int    `json:"output_index"`
	ResponseID   string `json:"response_id"`
	SampleRateHz int    `json:"sample_rate_hz"`
}

// EventType implements ServerEvent.
func (ResponseOutputAudioDelta) EventType() string { return "response.output_audio.delta" }

func (e ResponseOutputAudioDelta) wireSize() int {
	return 200 + len(e.Delta) + len(e.Format) + len(e.ItemID) + len(e.ResponseID)
}

// frame writes the delta's frame in one pass: its keys and the envelope's, sorted.
func (e ResponseOutputAudioDelta) frame(env Envelope) ([]byte, error) {
	b := make([]byte, 0, e.wireSize()+len(env.Type)+len(env.EventID)+64)
	b = append(b, `{"audio_duration_ms":`...)
	b, err := appendFloat(b, e.AudioDurationMs)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", e.EventType(), err)
	}
	b = append(b, `,"content_index":`...)
	b = strconv.AppendInt(b, int64(e.ContentIndex), 10)
	b = append(b, `,"delta":`...)
	b = appendBase64(b, e.Delta)
	b = append(b, `,"event_id":`...)
	b = appendString(b, env.EventID)
	b = append(b, `,"format":`...)
	b = appendString(b, e.Format)
	b = append(b, `,"item_id":`...)
	b = appendString(b, e.ItemID)
	b = append(b, `,"output_index":`...)
	b = strconv.AppendInt(b, int64(e.OutputIndex), 10)
	b = append(b, `,"response_id":`...)
	b = appendString(b, e.ResponseID)
	b = append(b, `,"sample_rate_hz":`...)
	b = strconv.AppendInt(b, int64(e.SampleRateHz), 10)
	if env.Seq != 0 {
		b = append(b, `,"server_event_seq":`...)
		b = strconv.AppendInt(b, env.Seq, 10)
	}
	b = append(b, `,"type":`...)
	b = appendString(b, env.Type)
	return append(b, '}'), nil
}

// ResponseOutputAudioTranscriptDelta is response.output_audio_transcript.delta (beta:
// response.audio_transcript.delta): the text of the audio chunk sent just before it.
type ResponseOutputAudioTranscriptDelta struct {
	ContentIndex int    `json:"content_index"`
	Delta        string `json:"delta"`
	ItemID       string `json:"item_id"`
	OutputIndex  int    `json:"output_index"`
	ResponseID   string `json:"response_id"`
}

// EventType implements ServerEvent.
func (ResponseOutputAudioTranscriptDelta) EventType() string {
	return "response.output_audio_transcript.delta"
}

func (e ResponseOutputAudioTranscriptDelta) wireSize() int {
	return 120 + len(e.Delta) + len(e.ItemID) + len(e.ResponseID)
}

// ResponseOutputTextDelta is response.output_text.delta (beta: response.text.delta).
type ResponseOutputTextDelta struct {
	ContentIndex int    `json:"content_index"`
	Delta        string `json:"delta"`
	ItemID       string `json:"item_id"`
	OutputIndex  int    `json:"output_index"`
	ResponseID   string `json:"response_id"`
}

// EventType implements ServerEvent.
func (ResponseOutputTextDelta) EventType() string { return "response.output_text.delta" }

func (e ResponseOutputTextDelta) wireSize() int {
	return 120 + len(e.Delta) + len(e.ItemID) + len(e.ResponseID)
}

// Response is a realtime.response, GA shape. Temperature is not part of the GA object; the
// beta spelling writes it (with modalities, voice and output_audio_format for audio).
type Response struct {
	Audio *ResponseAudio `json:"audio,omitempty"`
	// ConversationID is null for a response out of band.
	ConversationID  *string           `json:"conversation_id"`
	ID              string            `json:"id"`
	MaxOutputTokens MaxTokens         `json:"max_output_tokens"`
	Metadata        map[string]string `json:"metadata"` // the client's response.create metadata, echoed
	Object          string            `json:"object"`
	// Omniserve is an extension: where the response sits in the duplex session.
	Omniserve        ResponseExtension `json:"omniserve"`
	Output           []Item            `json:"output"`
	OutputModalities []string          `json:"output_modalities,omitempty"`
	Status           string            `json:"status"`
	StatusDetails    *StatusDetails    `json:"status_details"`
	Usage            *Usage            `json:"usage"`
	Temperature      float64           `json:"-"`
}

// ResponseAudio is a GA response's audio settings.
type ResponseAudio struct {
	Output AudioOutput `json:"output"`
}

// AudioOutput is the output side of a GA audio object.
type AudioOutput struct {
	Format FormatSpec `json:"format"`
	// Speed is the session object's (1.0); a response's audio has none.
	Speed *float64 `json:"speed,omitempty"`
	Voice string   `json:"voice"`
}

// FormatSpec is a GA audio format object: audio/pcm (with its rate), audio/pcmu, audio/pcma,
// audio/pcm_f32le (an extension, with its rate).
type FormatSpec struct {
	Rate int    `json:"rate,omitempty"`
	Type string `json:"type"`
}

// BetaName is the beta dialect's format string.
func (f FormatSpec) BetaName() string {
	switch f.Type {
	case "audio/pcmu":
		return "g711_ulaw"
	case "audio/pcma":
		return "g711_alaw"
	case "audio/pcm_f32le":
		return "pcm_f32le"
	}
	return "pcm16"
}

// MaxTokens is a max_output_tokens value: a count, or 0 for "inf".
type MaxTokens int

// MarshalJSON writes the count, or "inf".
func (m MaxTokens) MarshalJSON() ([]byte, error) {
	if m <= 0 {
		return []byte(`"inf"`), nil
	}
	return json.Marshal(int(m))
}

// ResponseExtension is the omniserve object of a response.
type ResponseExtension struct {
	AudioSentMs float64 `json:"audio_sent_ms"`
	Epoch       int     `json:"epoch"`
	SessionID   string  `json:"session_id"`
	TurnID      int     `json:"turn_id"`
}

// StatusDetails says why a response ended other than completed.
type StatusDetails struct {
	Reason string `json:"reason"`
	Type   string `json:"type"`
}

// Usage is a response's token usage.
type Usage struct {
	InputTokenDetails  InputTokenDetails  `json:"input_token_details"`
	InputTokens        int                `json:"input_tokens"`
	OutputTokenDetails OutputTokenDetails `json:"output_token_details"`
	OutputTokens       int                `json:"output_tokens"`
	TotalTokens        int                `json:"total_tokens"`
}

// InputTokenDetails splits a response's input tokens.
type InputTokenDetails struct {
	AudioTokens         int                `json:"audio_tokens"`
	CachedTokens        int                `json:"cached_tokens"`
	CachedTokensDetails CachedTokenDetails `json:"cached_tokens_details"`
	ImageTokens         int                `json:"image_tokens"`
	TextTokens          int                `json:"text_tokens"`
}

// CachedTokenDetails splits the cached input tokens.
type CachedTokenDetails struct {
	AudioTokens int `json:"audio_tokens"`
	ImageTokens int `json:"image_tokens"`
	TextTokens  int `json:"text_tokens"`
}

// OutputTokenDetails splits a response's output tokens.
type OutputTokenDetails struct {
	AudioTokens int `json:"audio_tokens"`
	TextTokens  int `json:"text_tokens"`
}

// betaResponse is Response in beta spelling.
type betaResponse struct {
	ConversationID    *string           `json:"conversation_id"`
	ID                string            `json:"id"`
	MaxOutputTokens   MaxTokens         `json:"max_output_tokens"`
	Metadata          map[string]string `json:"metadata"`
	Modalities        []string          `json:"modalities"`
	Object            string            `json:"object"`
	Omniserve         ResponseExtension `json:"omniserve"`
	Output            []Item            `json:"output"`
	OutputAudioFormat string            `json:"output_audio_format"`
	Status            string            `json:"status"`
	StatusDetails     *StatusDetails    `json:"status_details"`
	Temperature       float64           `json:"temperature"`
	Usage             *Usage            `json:"usage"`
	Voice             string            `json:"voice"`
}

func (r Response) beta() betaResponse {
	b := betaResponse{ConversationID: r.ConversationID, ID: r.ID, MaxOutputTokens: r.MaxOutputTokens,
		Metadata: r.Metadata, Modalities: []string{"text"}, Object: r.Object, Omniserve: r.Omniserve,
		Output: betaItems(r.Output), Status: r.Status, StatusDetails: r.StatusDetails,
		Temperature: r.Temperature, Usage: r.Usage}
	if r.Audio != nil {
		b.OutputAudioFormat, b.Voice = r.Audio.Output.Format.BetaName(), r.Audio.Output.Voice
	}
	for _, m := range r.OutputModalities {
		if m == "audio" {
			b.Modalities = []string{"text", "audio"} // beta: audio comes with its text
		}
	}
	return b
}

// ResponseCreated is response.created.
type ResponseCreated struct {
	Response   Response `json:"response"`
	ResponseID string   `json:"response_id"`
}

// EventType implements ServerEvent.
func (ResponseCreated) EventType() string { return "response.created" }

func (e ResponseCreated) betaSpelling() ServerEvent {
	return betaResponseEvent{Response: e.Response.beta(), ResponseID: e.ResponseID, typ: e.EventType()}
}

// ResponseDone is response.done.
type ResponseDone struct {
	Response   Response `json:"response"`
	ResponseID string   `json:"response_id"`
}

// EventType implements ServerEvent.
func (ResponseDone) EventType() string { return "response.done" }

func (e ResponseDone) betaSpelling() ServerEvent {
	return betaResponseEvent{Response: e.Response.beta(), ResponseID: e.ResponseID, typ: e.EventType()}
}

type betaResponseEvent struct {
	Response   betaResponse `json:"response"`
	ResponseID string       `json:"response_id"`
	typ        string
}

func (e betaResponseEvent) EventType() string { return e.typ }

// ResponseOutputItemAdded is response.output_item.added.
type ResponseOutputItemAdded struct {
	Item        Item   `json:"item"`
	OutputIndex int    `json:"output_index"`
	ResponseID  string `json:"response_id"`
}

// EventType implements ServerEvent.
func (ResponseOutputItemAdded) EventType() string { return "response.output_item.added" }

func (e ResponseOutputItemAdded) betaSpelling() ServerEvent { e.Item = betaItem(e.Item); return e }

// ResponseOutputItemDone is response.output_item.done.
type ResponseOutputItemDone struct {
	Item        Item   `json:"item"`
	OutputIndex int    `json:"output_index"`
	ResponseID  string `json:"response_id"`
}

// EventType implements ServerEvent.
func (ResponseOutputItemDone) EventType() string { return "response.output_item.done" }

func (e ResponseOutputItemDone) betaSpelling() ServerEvent { e.Item = betaItem(e.Item); return e }

// ResponseContentPartAdded is response.content_part.added.
type ResponseContentPartAdded struct {
	ContentIndex int         `json:"content_index"`
	ItemID       string      `json:"item_id"`
	OutputIndex  int         `json:"output_index"`
	Part         ContentPart `json:"part"`
	ResponseID   string      `json:"response_id"`
}

// EventType implements ServerEvent.
func (ResponseContentPartAdded) EventType() string { return "response.content_part.added" }

// ResponseContentPartDone is response.content_part.done.
type ResponseContentPartDone struct {
	ContentIndex int         `json:"content_index"`
	ItemID       string      `json:"item_id"`
	OutputIndex  int         `json:"output_index"`
	Part         ContentPart `json:"part"`
	ResponseID   string      `json:"response_id"`
}

// EventType implements ServerEvent.
func (ResponseContentPartDone) EventType() string { return "response.content_part.done" }

// ResponseOutputAudioDone is response.output_audio.done (beta: response.audio.done).
type ResponseOutputAudioDone struct {
	ContentIndex int    `json:"content_index"`
	ItemID       string `json:"item_id"`
	OutputIndex  int    `json:"output_index"`
	ResponseID   string `json:"response_id"`
}

// EventType implements ServerEvent.
func (ResponseOutputAudioDone) EventType() string { return "response.output_audio.done" }

// ResponseOutputAudioTranscriptDone is response.output_audio_transcript.done (beta:
// response.audio_transcript.done): the transcript of what the client heard.
type ResponseOutputAudioTranscriptDone struct {
	ContentIndex int    `json:"content_index"`
	ItemID       string `json:"item_id"`
	OutputIndex  int    `json:"output_index"`
	ResponseID   string `json:"response_id"`
	Transcript   string `json:"transcript"`
}

// EventType implements ServerEvent.
func (ResponseOutputAudioTranscriptDone) EventType() string {
	return "response.output_audio_transcript.done"
}

// ResponseOutputTextDone is response.output_text.done (beta: response.text.done).
type ResponseOutputTextDone struct {
	ContentIndex int    `json:"content_index"`
	ItemID       string `json:"item_id"`
	OutputIndex  int    `json:"output_index"`
	ResponseID   string `json:"response_id"`
	Text         string `json:"text"`
}

// EventType implements ServerEvent.
func (ResponseOutputTextDone) EventType() string { return "response.output_text.done" }

// ResponseListen is response.listen, an extension: the duplex engine decided to keep
// listening (no response).
type ResponseListen struct {
	Epoch     int            `json:"epoch"`
	Response  ListenResponse `json:"response"`
	SessionID string         `json:"session_id"`
	Turn      int            `json:"turn"`
}

// ListenResponse is response.listen's response object.
type ListenResponse struct {
	Object string `json:"object"`
	Status string `json:"status"`
}

// EventType implements ServerEvent.
func (ResponseListen) EventType() string { return "response.listen" }

// ResponseSpeak is response.speak, an extension: the duplex engine decided to speak.
type ResponseSpeak struct {
	ContentIndex int           `json:"content_index"`
	ItemID       string        `json:"item_id"`
	Metadata     SpeakMetadata `json:"metadata"`
	OutputIndex  int           `json:"output_index"`
	ResponseID   string        `json:"response_id"`
}

// SpeakMetadata is response.speak's metadata.
type SpeakMetadata struct {
	Epoch      int    `json:"epoch"`
	ModelSpeak bool   `json:"model_speak"`
	SessionID  string `json:"session_id"`
}

// EventType implements ServerEvent.
func (ResponseSpeak) EventType() string { return "response.speak" }

// OutputAudioBufferCleared is output_audio_buffer.cleared: the client drops the audio of the
// response it has not played. The session's (WebSocket) event says where the item was cut
// (ItemID, AudioEndMs); a WebRTC call's has the response only.
type OutputAudioBufferCleared struct {
	AudioEndMs *int   `json:"audio_end_ms,omitempty"`
	ItemID     string `json:"item_id,omitempty"`
	// ResponseID is null when no response was active (output_audio_buffer.clear then).
	ResponseID *string `json:"response_id"`
}

// EventType implements ServerEvent.
func (OutputAudioBufferCleared) EventType() string { return "output_audio_buffer.cleared" }

// OutputAudioBufferStarted is output_audio_buffer.started (WebRTC): the response's audio
// began to play.
type OutputAudioBufferStarted struct {
	ResponseID string `json:"response_id"`
}

// EventType implements ServerEvent.
func (OutputAudioBufferStarted) EventType() string { return "output_audio_buffer.started" }

// OutputAudioBufferStopped is output_audio_buffer.stopped (WebRTC): the response's audio was
// played out.
type OutputAudioBufferStopped struct {
	ResponseID string `json:"response_id"`
}

// EventType implements ServerEvent.
func (OutputAudioBufferStopped) EventType() string { return "output_audio_buffer.stopped" }

// RateLimitsUpdated is rate_limits.updated.
type RateLimitsUpdated struct {
	RateLimits []RateLimit `json:"rate_limits"`
}

// RateLimit is one rate limit.
type RateLimit struct {
	Limit        int     `json:"limit"`
	Name         string  `json:"name"`
	Remaining    int     `json:"remaining"`
	ResetSeconds float64 `json:"reset_seconds"`
}

// EventType implements ServerEvent.
func (RateLimitsUpdated) EventType() string { return "rate_limits.updated" }
