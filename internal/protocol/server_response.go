package protocol

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
