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

// LogprobTranscriber is a StreamTranscriber that can also give each transcript word's log
// posterior (include=logprobs); the stage pipeline has it.
type LogprobTranscriber interface {
	TranscribeLogprobs(ctx context.Context, pcm16k []float32, partial func(string)) (string, []audio.WordLogprob, error)
}

// StreamTranscriber is a Transcriber that reports partial hypotheses while it decodes; the
// stage pipeline has it. A Transcriber without it still streams: one delta with the final text.
type StreamTranscriber interface {
	TranscribeStream(ctx context.Context, pcm16k []float32, partial func(string)) (string, error)
}

// transcriptStreamWriteTimeout drops a client that stops reading a streamed transcription.
const transcriptStreamWriteTimeout = 10 * time.Second

type transcriptDelta struct {
	Type     string              `json:"type"` // transcript.text.delta
	Delta    string              `json:"delta"`
	Logprobs []transcriptLogprob `json:"logprobs"` // null unless include=logprobs; see serveStream
}

type transcriptDone struct {
	Type     string              `json:"type"` // transcript.text.done
	Text     string              `json:"text"`
	Logprobs []transcriptLogprob `json:"logprobs"` // null unless include=logprobs
	Usage    transcriptUsage     `json:"usage"`
}

// transcriptLogprob is OpenAI's transcription logprob entry, one per transcript word
// (audio.TranscriptToken); realtime input transcription gives the same.
type transcriptLogprob = audio.TranscriptToken

// transcriptLogprobs turns word posteriors into tokens; first is whether the first word starts the text
// (no space before it).
func transcriptLogprobs(lps []audio.WordLogprob, first bool) []transcriptLogprob {
	return audio.TranscriptTokens(lps, first)
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
	send := func(d string, lps []transcriptLogprob) {
		if d == "" || ctx.Err() != nil {
			return
		}
		if sse == nil {
			start()
		}
		if err := sse.send(transcriptDelta{Type: "transcript.text.delta", Delta: d, Logprobs: lps}); err != nil {
			cancel(err) // the client is gone or stalled: stop decoding
			return
		}
		emitted += d
	}
	partial := func(p string) {
		send(audio.StableDelta(emitted, prev, p, false), nil)
		prev = p
	}
	var (
		text string
		lps  []transcriptLogprob
		err  error
	)
	switch st, ok := h.asr.(StreamTranscriber); {
	case f.logprobs:
		var words []audio.WordLogprob
		if text, words, err = h.asr.(LogprobTranscriber).TranscribeLogprobs(ctx, f.audio, partial); err == nil {
			lps = transcriptLogprobs(words, true)
		}
	case ok:
		text, err = st.TranscribeStream(ctx, f.audio, partial)
	default:
		text, err = h.asr.Transcribe(ctx, f.audio)
	}
	if err == nil {
		// Partial hypotheses have no posteriors (the lattice exists once the utterance ends), so
		// only the last delta carries logprobs: those of its own words, when the deltas spell the
		// text (a final that revised a word already sent leaves them to the done event).
		d := audio.StableDelta(emitted, "", text, true)
		var dl []transcriptLogprob
		if n := len(strings.Fields(d)); lps != nil && n > 0 && emitted+d == text {
			dl = lps[len(lps)-n:]
		}
		send(d, dl)
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
	done := transcriptDone{Type: "transcript.text.done", Text: text, Logprobs: lps,
		Usage: transcriptUsage{Type: "duration", Seconds: float64(len(f.audio)) / audio.ASRSampleRate}}
	if err := sse.send(done); err != nil {
		h.log.Info("streamed transcription: client gone before done", zap.Error(err))
	}
}

// parseStreamFields reads stream and include (as include or include[], the OpenAI SDKs' name
// for a multipart array); include may name only logprobs, which, as OpenAI's, works only with
// response_format json (a streamed transcription is json events).
func parseStreamFields(r *http.Request, format string) (stream, logprobs bool, _ *oaierror.Error) {
	switch s := strings.TrimSpace(r.FormValue("stream")); s {
	case "", "false":
	case "true":
		stream = true
	default:
		return false, false, oaierror.BadRequest("stream", "invalid_type", fmt.Sprintf("stream %q must be true or false", s))
	}
	for _, k := range []string{"include", "include[]"} {
		for _, v := range r.MultipartForm.Value[k] {
			switch v = strings.TrimSpace(v); v {
			case "logprobs":
				logprobs = true
			default:
				return false, false, oaierror.BadRequest("include", "invalid_value", fmt.Sprintf("include %q is not known; the only value is logprobs", v))
			}
		}
	}
	if logprobs && format != "json" {
		return false, false, oaierror.BadRequest("include", "unsupported_value",
			fmt.Sprintf("include logprobs works only with response_format json, not %s", format))
	}
	return stream, logprobs, nil
}
