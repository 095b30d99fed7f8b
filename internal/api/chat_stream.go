package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/requestclient"
	"github.com/omniserve/omniserve/internal/speech"
)

// chatSSE writes server-sent events with a deadline per write, so a client that stops reading is
// dropped (and its generation aborted by the caller) instead of holding a slot forever.
type chatSSE struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     bytes.Buffer
}

func (s *chatSSE) send(v any) error {
	s.buf.Reset()
	s.buf.WriteString("data: ")
	if err := json.NewEncoder(&s.buf).Encode(v); err != nil { // Encode adds the newline
		return fmt.Errorf("encoding event: %w", err)
	}
	s.buf.WriteByte('\n')
	return s.write(s.buf.Bytes())
}

func (s *chatSSE) write(b []byte) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	if _, err := s.w.Write(b); err != nil {
		return fmt.Errorf("writing event: %w", err)
	}
	if err := s.rc.Flush(); err != nil {
		return fmt.Errorf("flushing event: %w", err)
	}
	return nil
}

// serveStream answers chat.completion.chunk events: a role chunk, content (or audio transcript and
// pcm16 data) deltas, a finish chunk, a usage chunk when asked, then [DONE].
func (h *chatHandler) serveStream(w http.ResponseWriter, r *http.Request, p *chatParsed, s *requestclient.ChatStream, o *chatOutput) {
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Connection", "keep-alive")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sse := &chatSSE{w: w, rc: http.NewResponseController(w), timeout: h.cfg.WriteTimeout}
	chunk := func(d chatDelta, finish *string) chatChunk {
		return chatChunk{ID: o.id, Object: "chat.completion.chunk", Created: o.created, Model: o.model,
			Choices: []chatChunkChoice{{Delta: d, FinishReason: finish}}}
	}
	empty := ""
	first := chatDelta{Role: "assistant", Content: &empty}
	if o.audio {
		first = chatDelta{Role: "assistant", Audio: &chatAudioDelta{ID: newChatAudioID(),
			ExpiresAt: time.Unix(o.created, 0).Add(chatAudioTTL).Unix()}}
	}
	if err := sse.send(chunk(first, nil)); err != nil {
		return
	}
	events := s.Events()
	for {
		var ev requestclient.ChatEvent
		var ok bool
		select {
		case <-r.Context().Done():
			if errors.Is(context.Cause(r.Context()), ErrShuttingDown) {
				// Cut by the shutdown timeout: the client is still there and learns why.
				e := &chatAPIError{Type: "server_error", Code: "shutting_down", Message: "the server shut down before the completion finished"}
				_ = sse.send(e.body())
			}
			return // the deferred Close aborts the generation
		case ev, ok = <-events:
		}
		if !ok || ev.Err != nil {
			err := ev.Err
			if err == nil {
				err = fmt.Errorf("the completion ended without a result")
			}
			h.log.Error("chat stream failed", zap.String("id", o.id), zap.Error(err))
			e := &chatAPIError{Type: "server_error", Code: "engine_error", Message: fmt.Sprintf("the completion failed: %v", err)}
			_ = sse.send(e.body())
			return
		}
		if d, has := h.streamDelta(o, ev); has {
			if err := sse.send(chunk(d, nil)); err != nil {
				h.log.Debug("chat stream write", zap.String("id", o.id), zap.Error(err))
				return
			}
		}
		if ev.Done {
			o.finishWith(ev)
			break
		}
	}
	if err := sse.send(chunk(chatDelta{}, &o.finish)); err != nil {
		return
	}
	if p.IncludeUsage {
		u := o.usage
		c := chatChunk{ID: o.id, Object: "chat.completion.chunk", Created: o.created, Model: o.model,
			Choices: []chatChunkChoice{}, Usage: &u}
		if err := sse.send(c); err != nil {
			return
		}
	}
	_ = sse.write([]byte("data: [DONE]\n\n"))
}

// streamDelta turns one engine event into a delta; has is false when there is nothing to send.
func (h *chatHandler) streamDelta(o *chatOutput, ev requestclient.ChatEvent) (d chatDelta, has bool) {
	if !o.audio {
		if ev.Text == "" {
			return d, false
		}
		t := ev.Text
		return chatDelta{Content: &t}, true
	}
	a := &chatAudioDelta{Transcript: ev.Text}
	if len(ev.Audio) > 0 {
		pcm, err := o.convertAudio(ev)
		if err != nil {
			h.log.Error("converting output audio", zap.Error(err))
		}
		a.Data = base64.StdEncoding.EncodeToString(speech.Float32ToPCM16Bytes(nil, pcm))
	}
	if a.Transcript == "" && a.Data == "" {
		return d, false
	}
	return chatDelta{Audio: a}, true
}
