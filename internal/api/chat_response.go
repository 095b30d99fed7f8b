package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/requestclient"
	"github.com/omniserve/omniserve/internal/speech"
)

// chatAudioRate is the rate of returned audio (WAV and pcm16), as OpenAI's.
const chatAudioRate = 24000

// chatAudioTTL is how long an audio id is said to be valid (expires_at); omniserve keeps no
// server-side audio, so a follow-up turn must resend the transcript as text.
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
	Role    string        `json:"role"`
	Content *string       `json:"content"`
	Refusal *string       `json:"refusal"`
	Audio   *chatAudioOut `json:"audio,omitempty"`
}

type chatChoice struct {
	Index        int                 `json:"index"`
	Message      chatResponseMessage `json:"message"`
	Logprobs     *struct{}           `json:"logprobs"`
	FinishReason string              `json:"finish_reason"`
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
	Role    string          `json:"role,omitempty"`
	Content *string         `json:"content,omitempty"`
	Audio   *chatAudioDelta `json:"audio,omitempty"`
}

type chatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   *chatUsage        `json:"usage,omitempty"`
}

// chatOutput is what one completion has produced so far.
type chatOutput struct {
	id, model string
	created   int64
	audio     bool
	format    string
	text      strings.Builder
	pcm       []float32         // 24 kHz
	rs        *speech.Resampler // the request's output stream resampler, made on first need
	usage     chatUsage
	finish    string
}

// addAudio appends a chunk, converting it to 24 kHz if the talker produced another rate.
func (o *chatOutput) convertAudio(ev requestclient.ChatEvent) ([]float32, error) {
	if ev.SampleRate == 0 || ev.SampleRate == chatAudioRate {
		return ev.Audio, nil
	}
	if o.rs == nil {
		rs, err := speech.NewResampler(ev.SampleRate, chatAudioRate)
		if err != nil {
			return nil, err
		}
		o.rs = rs
	}
	return o.rs.Process(nil, ev.Audio), nil // one stream per request: no distortion at chunk edges
}

func (o *chatOutput) finishWith(ev requestclient.ChatEvent) {
	o.finish = ev.FinishReason
	if o.finish != "length" {
		o.finish = "stop" // the wire knows stop and length only
	}
	o.usage = chatUsage{PromptTokens: ev.PromptTokens, CompletionTokens: ev.CompletionTokens,
		TotalTokens: ev.PromptTokens + ev.CompletionTokens}
}

func (o *chatOutput) encodeAudio() string {
	if o.format == "pcm16" {
		return base64.StdEncoding.EncodeToString(speech.Float32ToPCM16Bytes(nil, o.pcm))
	}
	return base64.StdEncoding.EncodeToString(speech.EncodeWAV(o.pcm, chatAudioRate))
}

// serveJSON collects the whole completion and answers one chat.completion object.
func (h *chatHandler) serveJSON(w http.ResponseWriter, r *http.Request, s *requestclient.ChatStream, o *chatOutput) {
	events := s.Events()
	for {
		var ev requestclient.ChatEvent
		var ok bool
		select {
		case <-r.Context().Done():
			if errors.Is(context.Cause(r.Context()), ErrShuttingDown) {
				writeChatError(w, &chatAPIError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "shutting_down",
					Message: "the server shut down before the completion finished"})
			}
			return // the deferred Close aborts and finalizes with reason abort
		case ev, ok = <-events:
		}
		if !ok {
			writeChatError(w, &chatAPIError{Status: http.StatusInternalServerError, Type: "server_error", Code: "engine_error",
				Message: "the completion ended without a result"})
			return
		}
		if ev.Err != nil {
			h.log.Error("chat completion failed", zap.String("id", o.id), zap.Error(ev.Err))
			writeChatError(w, &chatAPIError{Status: http.StatusInternalServerError, Type: "server_error", Code: "engine_error",
				Message: fmt.Sprintf("the completion failed: %v", ev.Err)})
			return
		}
		o.text.WriteString(ev.Text)
		if len(ev.Audio) > 0 {
			pcm, err := o.convertAudio(ev)
			if err != nil {
				h.log.Error("converting output audio", zap.Error(err))
			}
			o.pcm = append(o.pcm, pcm...)
		}
		if ev.Done {
			o.finishWith(ev)
			break
		}
	}
	msg := chatResponseMessage{Role: "assistant"}
	text := o.text.String()
	if o.audio {
		// As OpenAI: with audio output the words are the audio's transcript and content is null.
		msg.Audio = &chatAudioOut{ID: newChatAudioID(), Data: o.encodeAudio(), Transcript: text,
			ExpiresAt: time.Unix(o.created, 0).Add(chatAudioTTL).Unix()}
	} else {
		msg.Content = &text
	}
	resp := chatResponse{ID: o.id, Object: "chat.completion", Created: o.created, Model: o.model,
		Choices: []chatChoice{{Message: msg, FinishReason: o.finish}}, Usage: o.usage}
	w.Header().Set("Content-Type", "application/json")
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout))
	if err := json.NewEncoder(w).Encode(resp); err != nil {
		h.log.Debug("writing chat response", zap.String("id", o.id), zap.Error(err))
	}
}
