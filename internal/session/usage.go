package session

import (
	"math"
)

// Token accounting for response.done usage (docs/REALTIME.md "Usage").
//
// Text tokens are the engine's own counts (duplex.Usage, from the thinker stage): input text
// tokens are every token the model read for the response (the chat-templated instructions,
// messages and transcripts in its KV sequence), cached tokens the part of them that was in the
// KV cache before the turn, so input - cached is exactly the num_tokens_in of the turn's
// stage-0 statistics; output text tokens are the tokens generated (num_tokens_out).
//
// The model reads and writes text only: user audio reaches it as the ASR's transcript and its
// reply is voiced by the talker. Audio tokens are therefore a stated equivalent of OpenAI's,
// at OpenAI's published rates ("Managing costs"): one token per 100 ms of user audio and one
// per 50 ms of assistant audio. Input audio tokens count the audio items of the context the
// response read (the whole conversation, as OpenAI re-reads it each turn); the part the
// previous response already read or spoke is cached. Output audio tokens count the audio sent.
const (
	userAudioMsPerToken      = 100
	assistantAudioMsPerToken = 50
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

// audioTokens is the equivalent audio tokens of an audio item (0 for text).
func (it *item) audioTokens() int {
	switch {
	case !it.Audio:
		return 0
	case it.Role == "assistant":
		return audioTokens(it.AudioMs, assistantAudioMsPerToken)
	default:
		return audioTokens(it.AudioMs, userAudioMsPerToken)
	}
}

// view is the usage as the client sees it.
func (u usage) view() Usage {
	in, out := u.inText+u.inAudio, u.outText+u.outAudio
	return Usage{
		TotalTokens: in + out, InputTokens: in, OutputTokens: out,
		InputText: u.inText, InputAudio: u.inAudio, Cached: u.cached,
		CachedText: u.cachedText, CachedAudio: u.cachedAudio,
		OutputText: u.outText, OutputAudio: u.outAudio,
	}
}

// audioUsage is the audio side of the input of a response that starts now with options o: the
// audio items of the conversation (convAudio tokens; of the items its input references, with
// input[]), cached up to what the previous response read and wrote.
func (rs *responses) audioUsage(o respOptions, convAudio int) usage {
	if o.input != nil {
		return usage{inAudio: o.inputAudio} // a context of its own: nothing cached
	}
	u := usage{inAudio: convAudio}
	prev := rs.lastUsage
	u.cachedAudio = min(u.inAudio, prev.inAudio+prev.outAudio)
	return u
}

// usage is the response's usage as it ends: the audio side from its context and the audio sent,
// the text side from the engine's count. A response that ends before the engine reported its
// prompt (cancelled while queued or prefilling) read no input: it has no input tokens at all.
// One that ends before the engine's final count has the tokens behind the text deltas received
// as output.
func (r *response) usage() usage {
	var u usage
	u.outText = r.out.outTokens
	if e := r.engineUsage; e != nil {
		u = r.inputUsage
		u.inText, u.cachedText = e.InputTokens, min(e.CachedTokens, e.InputTokens)
		u.outText = r.out.outTokens
		if e.Final {
			u.outText = e.OutputTokens
		}
	}
	if r.audio {
		u.outAudio = audioTokens(r.play.sentMs, assistantAudioMsPerToken)
	}
	u.cached = u.cachedText + u.cachedAudio
	return u
}
