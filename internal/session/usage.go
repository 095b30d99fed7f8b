package session

import "math"

// Token accounting for response.done usage. OpenAI bills user audio at about one token per
// 100 ms and assistant audio at one per 50 ms ("Managing costs"); omniserve reports its audio
// with those same rates, so usage compares with OpenAI's. Output text tokens are exact (one per
// model token generated). Input text is counted at OpenAI's rule of thumb of four characters per
// token, since the ASR transcript and the chat template are tokenized inside the engine.
const (
	userAudioMsPerToken      = 100
	assistantAudioMsPerToken = 50
	charsPerToken            = 4
)

// usage is the response.done usage object.
type usage struct {
	inText, inAudio, cached int
	cachedText, cachedAudio int
	outText, outAudio       int
}

func audioTokens(ms float64, perToken int) int {
	if ms <= 0 {
		return 0
	}
	return int(math.Ceil(ms / float64(perToken)))
}

func textTokens(s string) int { return (len(s) + charsPerToken - 1) / charsPerToken }

func (u usage) wire() map[string]any {
	in, out := u.inText+u.inAudio, u.outText+u.outAudio
	return map[string]any{
		"total_tokens": in + out, "input_tokens": in, "output_tokens": out,
		"input_token_details": map[string]any{
			"text_tokens": u.inText, "audio_tokens": u.inAudio, "image_tokens": 0,
			"cached_tokens":         u.cached,
			"cached_tokens_details": map[string]any{"text_tokens": u.cachedText, "audio_tokens": u.cachedAudio, "image_tokens": 0},
		},
		"output_token_details": map[string]any{"text_tokens": u.outText, "audio_tokens": u.outAudio},
	}
}

// contextUsage is the input of a response that starts now: the instructions and every item of
// the conversation (the whole conversation is the model's input each turn, as at OpenAI).
// The part the previous response already read, plus what it wrote, sits in the engine's KV
// cache and is reported as cached.
func (s *DuplexSession) contextUsage() usage {
	u := usage{inText: textTokens(s.cfg.Instructions)}
	for _, it := range s.items {
		switch {
		case it.Role == "user" && it.Audio:
			u.inAudio += audioTokens(it.AudioMs, userAudioMsPerToken)
		case it.Role == "assistant" && it.Audio:
			u.inAudio += audioTokens(it.AudioMs, assistantAudioMsPerToken)
		default:
			u.inText += textTokens(it.Text)
		}
	}
	prev := s.lastUsage
	u.cachedText = min(u.inText, prev.inText+prev.outText)
	u.cachedAudio = min(u.inAudio, prev.inAudio+prev.outAudio)
	u.cached = u.cachedText + u.cachedAudio
	return u
}
