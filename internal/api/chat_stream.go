package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/oaierror"
	"github.com/omniserve/omniserve/internal/requestclient"
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

// indexedEvent is one engine event of choice i; closed marks the end of that choice's events.
type indexedEvent struct {
	i      int
	ev     requestclient.ChatEvent
	closed bool
}

// fanIn merges the choices' events into one channel. The forwarding goroutines are owned by the
// returned stop, which cancels and waits for them.
func fanIn(ctx context.Context, streams []*requestclient.ChatStream) (<-chan indexedEvent, func()) {
	ctx, cancel := context.WithCancel(ctx)
	merged := make(chan indexedEvent)
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			events := s.Events()
			for {
				ie := indexedEvent{i: i}
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-events:
					ie.ev, ie.closed = ev, !ok
				}
				select {
				case merged <- ie:
				case <-ctx.Done():
					return
				}
				if ie.closed {
					return
				}
			}
		}()
	}
	return merged, func() { cancel(); wg.Wait() }
}

// serveStream answers chat.completion.chunk events: a role chunk per choice, content (or audio
// transcript and pcm16 data) deltas, a finish chunk per choice, a usage chunk when asked, then
// [DONE]. The status line waits for the first engine event, so that a failure known before
// any output (a remote thinker's upstream 429, a prompt too long after transcription) is an
// HTTP error with its own status rather than an error event inside a 200 stream.
func (h *chatHandler) serveStream(w http.ResponseWriter, r *http.Request, p *chatParsed, streams []*requestclient.ChatStream, outs []*chatOutput) {
	events, stop := fanIn(r.Context(), streams)
	defer stop()
	var first indexedEvent
	select {
	case <-r.Context().Done():
		if errors.Is(context.Cause(r.Context()), ErrShuttingDown) {
			oaierror.Write(w, &oaierror.Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "shutting_down",
				Message: "the server shut down before the completion started"})
		}
		return // the deferred Close aborts the generations
	case first = <-events:
	}
	if first.closed || first.ev.Err != nil {
		oaierror.Write(w, h.streamFailure(outs[first.i], first.ev.Err))
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Connection", "keep-alive")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sse := &chatSSE{w: w, rc: http.NewResponseController(w), timeout: h.cfg.WriteTimeout}
	o0 := outs[0]
	chunk := func(i int, d chatDelta, finish *string, lps []requestclient.TokenLogprob) chatChunk {
		c := chatChunkChoice{Index: i, Delta: d, FinishReason: finish}
		if len(lps) > 0 {
			c.Logprobs = &chatLogprobs{Content: wireLogprobs(lps)}
		}
		return chatChunk{ID: o0.id, Object: "chat.completion.chunk", Created: o0.created, Model: o0.model,
			Choices: []chatChunkChoice{c}}
	}
	for i, o := range outs {
		empty := ""
		role := chatDelta{Role: "assistant", Content: &empty}
		if o.audio {
			role = chatDelta{Role: "assistant", Audio: &chatAudioDelta{ID: o.audioID, ExpiresAt: o.expiresAt()}}
		}
		if err := sse.send(chunk(i, role, nil, nil)); err != nil {
			return
		}
	}
	pending := &first
	for left := len(outs); left > 0; {
		var ie indexedEvent
		if pending != nil {
			ie, pending = *pending, nil
		} else {
			select {
			case <-r.Context().Done():
				if errors.Is(context.Cause(r.Context()), ErrShuttingDown) {
					// Cut by the shutdown timeout: the client is still there and learns why.
					e := &oaierror.Error{Type: "server_error", Code: "shutting_down", Message: "the server shut down before the completion finished"}
					_ = sse.send(e.Body())
				}
				return // the deferred Close aborts the generations
			case ie = <-events:
			}
		}
		o, ev := outs[ie.i], ie.ev
		if o.done {
			continue // the channel closing after Done
		}
		if ie.closed || ev.Err != nil {
			_ = sse.send(h.streamFailure(o, ev.Err).Body())
			return
		}
		o.text.WriteString(ev.Text)
		if c := ev.ToolCall; c != nil {
			o.calls = append(o.calls, *c)
			h.countToolCall()
			for _, td := range toolCallDeltas(*c) {
				if err := sse.send(chunk(ie.i, chatDelta{ToolCalls: []chatToolCallDelta{td}}, nil, nil)); err != nil {
					return
				}
			}
		}
		if d, has := h.streamDelta(o, ev); has || len(ev.Logprobs) > 0 {
			if err := sse.send(chunk(ie.i, d, nil, ev.Logprobs)); err != nil {
				h.log.Debug("chat stream write", zap.String("id", o.id), zap.Error(err))
				return
			}
		}
		if ev.Done {
			if tail := o.flushAudio(); len(tail) > 0 {
				d := chatDelta{Audio: &chatAudioDelta{Data: base64.StdEncoding.EncodeToString(audio.Float32ToPCM16Bytes(nil, tail))}}
				if err := sse.send(chunk(ie.i, d, nil, nil)); err != nil {
					return
				}
			}
			o.finishWith(ev)
			h.remember(o)
			left--
			if err := sse.send(chunk(ie.i, chatDelta{}, &o.finish, nil)); err != nil {
				return
			}
		}
	}
	if p.IncludeUsage {
		u := totalUsage(outs)
		c := chatChunk{ID: o0.id, Object: "chat.completion.chunk", Created: o0.created, Model: o0.model,
			Choices: []chatChunkChoice{}, Usage: &u}
		if err := sse.send(c); err != nil {
			return
		}
	}
	_ = sse.write([]byte("data: [DONE]\n\n"))
}

// streamFailure is the answer to a choice that failed (err) or ended without a result (nil):
// an upstream's own error when a remote stage failed, context_length_exceeded, or a 500
// engine_error.
func (h *chatHandler) streamFailure(o *chatOutput, err error) *oaierror.Error {
	if err == nil {
		err = errNoResult
	}
	if errors.Is(err, requestclient.ErrContextLength) {
		return contextLengthError(err)
	}
	return h.engineError(o.id, "the completion failed", err)
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
		a.Data = base64.StdEncoding.EncodeToString(audio.Float32ToPCM16Bytes(nil, pcm))
	}
	if a.Transcript == "" && a.Data == "" {
		return d, false
	}
	return chatDelta{Audio: a}, true
}
