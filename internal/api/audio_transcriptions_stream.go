package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/oaierror"
)

// StreamTranscriber is a Transcriber that reports partial hypotheses while it decodes; the
// stage pipeline has it. A Transcriber without it still streams: one delta with the final text.
type StreamTranscriber interface {
	TranscribeStream(ctx context.Context, pcm16k []float32, partial func(string)) (string, error)
}

// transcriptStreamWriteTimeout drops a client that stops reading a streamed transcription.
const transcriptStreamWriteTimeout = 10 * time.Second

type transcriptDelta struct {
	Type     string `json:"type"` // transcript.text.delta
	Delta    string `json:"delta"`
	Logprobs []any  `json:"logprobs"` // always null: include=logprobs is refused
}

type transcriptDone struct {
	Type     string          `json:"type"` // transcript.text.done
	Text     string          `json:"text"`
	Logprobs []any           `json:"logprobs"`
	Usage    transcriptUsage `json:"usage"`
}

type transcriptUsage struct {
	Type    string  `json:"type"` // duration
	Seconds float64 `json:"seconds"`
}

// serveStream answers stream=true as OpenAI streams its transcription models: text/event-stream
// of transcript.text.delta events while the ASR decodes, then one transcript.text.done. The
// status line waits for the first delta, so a failure before any text is an HTTP error.
func (h *transcriptionsHandler) serveStream(w http.ResponseWriter, r *http.Request, f *transcriptionForm) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	var (
		sse           *chatSSE
		emitted, prev string
	)
	start := func() {
		hd := w.Header()
		hd.Set("Content-Type", "text/event-stream")
		hd.Set("Cache-Control", "no-cache")
		hd.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		sse = &chatSSE{w: w, rc: http.NewResponseController(w), timeout: transcriptStreamWriteTimeout}
	}
	send := func(d string) {
		if d == "" || ctx.Err() != nil {
			return
		}
		if sse == nil {
			start()
		}
		if err := sse.send(transcriptDelta{Type: "transcript.text.delta", Delta: d}); err != nil {
			cancel(err) // the client is gone or stalled: stop decoding
			return
		}
		emitted += d
	}
	partial := func(p string) {
		send(audio.StableDelta(emitted, prev, p, false))
		prev = p
	}
	var (
		text string
		err  error
	)
	if st, ok := h.asr.(StreamTranscriber); ok {
		text, err = st.TranscribeStream(ctx, f.audio, partial)
	} else {
		text, err = h.asr.Transcribe(ctx, f.audio)
	}
	if err == nil {
		send(audio.StableDelta(emitted, "", text, true))
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		h.log.Info("streamed transcription ended early", zap.Error(cause))
		return
	}
	if r.Context().Err() != nil {
		return
	}
	if err != nil {
		h.log.Warn("transcription failed", zap.Error(err))
		e := audioEngineError(err, "the transcription failed")
		if sse == nil {
			oaierror.Write(w, e)
			return
		}
		_ = sse.send(map[string]any{"type": "error", "error": map[string]any{"type": e.Type, "code": e.Code, "message": e.Message}})
		return
	}
	if sse == nil {
		start()
	}
	done := transcriptDone{Type: "transcript.text.done", Text: text,
		Usage: transcriptUsage{Type: "duration", Seconds: float64(len(f.audio)) / audio.ASRSampleRate}}
	if err := sse.send(done); err != nil {
		h.log.Info("streamed transcription: client gone before done", zap.Error(err))
	}
}

// parseStreamFields reads stream and include; include may name only logprobs, which this ASR
// cannot give (pocketsphinx scores a path, not tokens), so it is refused rather than ignored.
func parseStreamFields(r *http.Request) (bool, *oaierror.Error) {
	stream := false
	switch s := strings.TrimSpace(r.FormValue("stream")); s {
	case "", "false":
	case "true":
		stream = true
	default:
		return false, oaierror.BadRequest("stream", "invalid_type", fmt.Sprintf("stream %q must be true or false", s))
	}
	for _, k := range []string{"include", "include[]"} {
		for _, v := range r.MultipartForm.Value[k] {
			switch v = strings.TrimSpace(v); v {
			case "logprobs":
				return false, oaierror.BadRequest("include", "unsupported_value",
					"include logprobs is not supported: this server's speech recognizer gives no token log probabilities")
			default:
				return false, oaierror.BadRequest("include", "invalid_value", fmt.Sprintf("include %q is not known; the only value is logprobs", v))
			}
		}
	}
	return stream, nil
}
