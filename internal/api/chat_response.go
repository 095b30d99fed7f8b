package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/oaierror"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// chatAudioRate is the rate of returned audio (WAV and pcm16), as OpenAI's.
const chatAudioRate = 24000

// chatAudioTTL is how long an audio id stays valid (expires_at): until then a follow-up
// request may name it in an assistant message (see chatAudioStore).
const chatAudioTTL = time.Hour

type chatUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type chatAudioOut struct {
	ID         string `json:"id"`
	Data       string `json:"data"`
	Transcript string `json:"transcript"`
	ExpiresAt  int64  `json:"expires_at"`
}

type chatResponseMessage struct {
	Role      string         `json:"role"`
	Content   *string        `json:"content"`
	Refusal   *string        `json:"refusal"`
	Audio     *chatAudioOut  `json:"audio,omitempty"`
	ToolCalls []chatToolCall `json:"tool_calls,omitempty"`
}

type chatChoice struct {
	Index        int                 `json:"index"`
	Message      chatResponseMessage `json:"message"`
	Logprobs     *chatLogprobs       `json:"logprobs"`
	FinishReason string              `json:"finish_reason"`
}

// chatLogprobs is a choice's logprobs: one entry per generated token.
type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
	Refusal *[]struct{}        `json:"refusal"`
}

type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float64          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// tokenBytes is OpenAI's bytes field: the token's UTF-8 bytes as integers (a token may end
// inside a character, which the token string cannot show).
func tokenBytes(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}

func wireLogprobs(lps []requestclient.TokenLogprob) []chatTokenLogprob {
	out := make([]chatTokenLogprob, 0, len(lps))
	for _, lp := range lps {
		e := chatTokenLogprob{Token: lp.Text, Logprob: float64(lp.Logprob), Bytes: tokenBytes(lp.Text),
			TopLogprobs: make([]chatTopLogprob, 0, len(lp.Top))}
		for _, t := range lp.Top {
			e.TopLogprobs = append(e.TopLogprobs, chatTopLogprob{Token: t.Text, Logprob: float64(t.Logprob), Bytes: tokenBytes(t.Text)})
		}
		out = append(out, e)
	}
	return out
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   chatUsage    `json:"usage"`
}

type chatAudioDelta struct {
	ID         string `json:"id,omitempty"`
	Data       string `json:"data,omitempty"`
	Transcript string `json:"transcript,omitempty"`
	ExpiresAt  int64  `json:"expires_at,omitempty"`
}

type chatDelta struct {
	Role      string              `json:"role,omitempty"`
	Content   *string             `json:"content,omitempty"`
	Audio     *chatAudioDelta     `json:"audio,omitempty"`
	ToolCalls []chatToolCallDelta `json:"tool_calls,omitempty"`
}

type chatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   *chatUsage        `json:"usage,omitempty"`
}

// chatOutput is what one choice of a completion has produced so far.
type chatOutput struct {
	index     int
	id, model string
	created   int64
	audio     bool
	audioID   string // with audio: the id a follow-up request may name
	format    string
	logprobs  bool
	text      strings.Builder
	lps       []requestclient.TokenLogprob
	calls     []duplex.ToolCall
	pcm       []float32        // 24 kHz
	rs        *audio.Resampler // the request's output stream resampler, made on first need
	rsIn      int              // samples that went into rs
	rsOut     int              // samples that came out of rs
	usage     chatUsage
	finish    string
	done      bool
}

func (o *chatOutput) expiresAt() int64 { return time.Unix(o.created, 0).Add(chatAudioTTL).Unix() }

// remember stores a finished audio choice's transcript for multi-turn audio.
func (h *chatHandler) remember(o *chatOutput) {
	if o.audio && o.audioID != "" {
		h.audio.put(o.audioID, o.text.String(), time.Unix(o.expiresAt(), 0))
	}
}

// totalUsage adds the choices up; the prompt is counted once, as OpenAI counts it.
func totalUsage(outs []*chatOutput) chatUsage {
	var u chatUsage
	for i, o := range outs {
		if i == 0 {
			u.PromptTokens = o.usage.PromptTokens
		}
		u.CompletionTokens += o.usage.CompletionTokens
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// addAudio appends a chunk, converting it to 24 kHz if the talker produced another rate.
func (o *chatOutput) convertAudio(ev requestclient.ChatEvent) ([]float32, error) {
	if ev.SampleRate == 0 || ev.SampleRate == chatAudioRate {
		return ev.Audio, nil
	}
	if o.rs == nil {
		rs, err := audio.NewResampler(ev.SampleRate, chatAudioRate)
		if err != nil {
			return nil, err
		}
		o.rs = rs
	}
	out := o.rs.Process(nil, ev.Audio) // one stream per request: no distortion at chunk edges
	o.rsIn += len(ev.Audio)
	o.rsOut += len(out)
	return out, nil
}

// flushAudio returns the output the resampler still holds back by its filter delay (up to
// half a filter length, ≤ 0.5 ms), so that the choice's audio has exactly the length of what
// the talker produced: ceil(in·24000/rate) samples. Nil when no resampling took place.
func (o *chatOutput) flushAudio() []float32 {
	if o.rs == nil {
		return nil
	}
	from, to := o.rs.Rates()
	want := audio.ResampledLen(o.rsIn, from, to) - o.rsOut
	tail := o.rs.Flush(nil)
	tail = tail[:max(0, min(want, len(tail)))]
	o.rsOut += len(tail)
	return tail
}

func (o *chatOutput) finishWith(ev requestclient.ChatEvent) {
	o.done = true
	o.finish = ev.FinishReason
	if o.finish != "length" && o.finish != duplex.FinishToolCalls {
		o.finish = "stop" // the wire knows stop, length and tool_calls only
	}
	o.usage = chatUsage{PromptTokens: ev.PromptTokens, CompletionTokens: ev.CompletionTokens,
		TotalTokens: ev.PromptTokens + ev.CompletionTokens}
}

func (o *chatOutput) encodeAudio() string {
	if o.format == "pcm16" {
		return base64.StdEncoding.EncodeToString(audio.Float32ToPCM16Bytes(nil, o.pcm))
	}
	return base64.StdEncoding.EncodeToString(audio.EncodeWAV(o.pcm, chatAudioRate))
}

// serveJSON collects every choice and answers one chat.completion object.
func (h *chatHandler) serveJSON(w http.ResponseWriter, r *http.Request, streams []*requestclient.ChatStream, outs []*chatOutput) {
	choices := make([]chatChoice, len(outs))
	for i, o := range outs {
		if e := h.collect(r, streams[i], o); e != nil {
			if e.Status != 0 {
				oaierror.Write(w, e)
			}
			return
		}
		h.remember(o)
		msg := chatResponseMessage{Role: "assistant"}
		text := o.text.String()
		if o.audio {
			// As OpenAI: with audio output the words are the audio's transcript and content is null.
			msg.Audio = &chatAudioOut{ID: o.audioID, Data: o.encodeAudio(), Transcript: text, ExpiresAt: o.expiresAt()}
		} else if text != "" || len(o.calls) == 0 {
			msg.Content = &text // null when the reply is tool calls alone, as OpenAI's
		}
		msg.ToolCalls = wireToolCalls(o.calls)
		choices[i] = chatChoice{Index: i, Message: msg, FinishReason: o.finish}
		if o.logprobs {
			choices[i].Logprobs = &chatLogprobs{Content: wireLogprobs(o.lps)}
		}
	}
	o := outs[0]
	resp := chatResponse{ID: o.id, Object: "chat.completion", Created: o.created, Model: o.model,
		Choices: choices, Usage: totalUsage(outs)}
	w.Header().Set("Content-Type", "application/json")
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout))
	if err := json.NewEncoder(w).Encode(resp); err != nil {
		h.log.Debug("writing chat response", zap.String("id", o.id), zap.Error(err))
	}
}

// collect reads one choice to its end. A returned error with Status 0 means the client is gone
// (nothing to answer).
func (h *chatHandler) collect(r *http.Request, s *requestclient.ChatStream, o *chatOutput) *oaierror.Error {
	events := s.Events()
	for {
		var ev requestclient.ChatEvent
		var ok bool
		select {
		case <-r.Context().Done():
			if errors.Is(context.Cause(r.Context()), ErrShuttingDown) {
				return &oaierror.Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "shutting_down",
					Message: "the server shut down before the completion finished"}
			}
			return &oaierror.Error{} // the deferred Close aborts and finalizes with reason abort
		case ev, ok = <-events:
		}
		if !ok {
			return h.engineError(o.id, "the completion failed", errNoResult)
		}
		if errors.Is(ev.Err, requestclient.ErrContextLength) {
			return contextLengthError(ev.Err) // known only after transcribing input audio
		}
		if ev.Err != nil {
			return h.engineError(o.id, "the completion failed", ev.Err)
		}
		o.text.WriteString(ev.Text)
		o.lps = append(o.lps, ev.Logprobs...)
		if ev.ToolCall != nil {
			o.calls = append(o.calls, *ev.ToolCall)
			h.countToolCall()
		}
		if len(ev.Audio) > 0 {
			pcm, err := o.convertAudio(ev)
			if err != nil {
				h.log.Error("converting output audio", zap.Error(err))
			}
			o.pcm = append(o.pcm, pcm...)
		}
		if ev.Done {
			o.pcm = append(o.pcm, o.flushAudio()...)
			o.finishWith(ev)
			return nil
		}
	}
}
