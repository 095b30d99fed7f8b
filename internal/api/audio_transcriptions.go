package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/oaierror"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// Transcriber turns one 16 kHz mono utterance into text; the stage pipeline implements it on its
// ASR, local or remote.
type Transcriber interface {
	Transcribe(ctx context.Context, pcm16k []float32) (string, error)
}

// AudioConfig configures the /v1/audio/* handlers. Zero fields take the defaults written here.
type AudioConfig struct {
	// MaxBodyBytes caps an upload (default DefaultMaxBodyBytes, as server.max_body_bytes); larger gets 413.
	MaxBodyBytes int64
	// MaxInFlight bounds concurrent requests per endpoint (default 16); one more gets 429.
	MaxInFlight int
	// MaxInputChars bounds /v1/audio/speech input (default 4096, OpenAI's limit).
	MaxInputChars int
}

func (c *AudioConfig) withDefaults() {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 16
	}
	if c.MaxInputChars <= 0 {
		c.MaxInputChars = 4096
	}
}

// audioEndpoint is what the two audio endpoints share: their configuration, their logger and
// their bound on concurrent requests.
type audioEndpoint struct {
	cfg   AudioConfig
	log   *zap.Logger
	slots slots
}

func newAudioEndpoint(cfg AudioConfig, log *zap.Logger) audioEndpoint {
	cfg.withDefaults()
	if log == nil {
		log = zap.NewNop()
	}
	return audioEndpoint{cfg: cfg, log: log.Named("audio"), slots: newSlots(cfg.MaxInFlight)}
}

// take takes the request's slot; when none is free it answers 429, naming what it counts
// (syntheses, transcriptions), and ok is false.
func (e *audioEndpoint) take(w http.ResponseWriter, what string) (release func(), ok bool) {
	release, ok = e.slots.take(1)
	if !ok {
		oaierror.Write(w, overloaded(1, fmt.Sprintf("at the limit of %d concurrent %s; retry later", e.cfg.MaxInFlight, what)))
	}
	return release, ok
}

type transcriptionsHandler struct {
	audioEndpoint
	asr Transcriber
}

// NewTranscriptionsHandler serves OpenAI's POST /v1/audio/transcriptions: a multipart upload
// with file (WAV, or raw 16-bit LE PCM named *.pcm / *.raw at sample_rate, default 16000),
// model, and optional language (English only), response_format (json, text, verbose_json),
// stream (text/event-stream of transcript.text.delta and .done events), temperature and prompt
// (accepted, unused), and include=logprobs (response_format json only; the answer's logprobs are
// per word, see transcriptLogprob). log may be nil.
func NewTranscriptionsHandler(cfg AudioConfig, asr Transcriber, log *zap.Logger) http.Handler {
	return &transcriptionsHandler{audioEndpoint: newAudioEndpoint(cfg, log), asr: asr}
}

type transcriptionForm struct {
	audio    []float32 // 16 kHz mono
	format   string
	language string
	stream   bool
	logprobs bool // include=logprobs
}

func (h *transcriptionsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f, apiErr := parseTranscriptionForm(w, r, h.cfg.MaxBodyBytes)
	if apiErr != nil {
		oaierror.Write(w, apiErr)
		return
	}
	release, ok := h.take(w, "transcriptions")
	if !ok {
		return
	}
	defer release()
	if f.logprobs {
		if _, ok := h.asr.(LogprobTranscriber); !ok {
			oaierror.Write(w, oaierror.BadRequest("include", "unsupported_value",
				"include logprobs is not supported: this server's speech recognizer gives no log probabilities"))
			return
		}
	}
	if f.stream {
		h.serveStream(w, r, f)
		return
	}
	var (
		text  string
		words []audio.WordLogprob
		err   error
	)
	if f.logprobs {
		text, words, err = h.asr.(LogprobTranscriber).TranscribeLogprobs(r.Context(), f.audio, nil)
	} else {
		text, err = h.asr.Transcribe(r.Context(), f.audio)
	}
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		h.log.Warn("transcription failed", zap.Error(err))
		oaierror.Write(w, audioEngineError(err, "the transcription failed"))
		return
	}
	switch f.format {
	case "text":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, text+"\n")
	case "verbose_json":
		dur := float64(len(f.audio)) / audio.ASRSampleRate
		writeJSON(w, http.StatusOK, map[string]any{
			"task": "transcribe", "language": "english", "duration": dur, "text": text,
			"segments": []map[string]any{{
				"id": 0, "seek": 0, "start": 0.0, "end": dur, "text": text, "tokens": []int{},
				"temperature": 0.0, "avg_logprob": 0.0, "compression_ratio": 0.0, "no_speech_prob": 0.0,
			}},
		})
	default:
		if f.logprobs {
			writeJSON(w, http.StatusOK, map[string]any{"text": text, "logprobs": transcriptLogprobs(words, true)})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"text": text})
	}
}

func parseTranscriptionForm(w http.ResponseWriter, r *http.Request, maxBody int64) (*transcriptionForm, *oaierror.Error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if err := r.ParseMultipartForm(8 << 20); err != nil {
		return nil, bodyError(err, maxBody, "the body must be multipart/form-data")
	}
	defer func() { _ = r.MultipartForm.RemoveAll() }()
	val := func(k string) string { return strings.TrimSpace(r.FormValue(k)) }
	if val("model") == "" {
		return nil, oaierror.BadRequest("model", "missing_required_parameter", "you must provide a model parameter")
	}
	f := &transcriptionForm{format: val("response_format"), language: val("language")}
	switch f.format {
	case "":
		f.format = "json"
	case "json", "text", "verbose_json":
	default:
		return nil, oaierror.BadRequest("response_format", "unsupported_value",
			fmt.Sprintf("response_format %q is not supported; use json, text or verbose_json", f.format))
	}
	if f.language != "" && !strings.EqualFold(f.language, "en") && !strings.EqualFold(f.language, "english") {
		return nil, oaierror.BadRequest("language", "unsupported_value",
			fmt.Sprintf("language %q is not supported; this server transcribes English (en)", f.language))
	}
	var apiErr *oaierror.Error
	if f.stream, f.logprobs, apiErr = parseStreamFields(r, f.format); apiErr != nil {
		return nil, apiErr
	}
	file, hdr, err := r.FormFile("file")
	if err != nil {
		return nil, oaierror.BadRequest("file", "missing_required_parameter", "you must provide a file parameter (the audio)")
	}
	defer file.Close()
	audio, apiErr := decodeUpload(file, hdr, val("sample_rate"))
	if apiErr != nil {
		return nil, apiErr
	}
	f.audio = audio
	return f, nil
}

// decodeUpload reads a WAV (by its RIFF header) or raw PCM16 upload and returns 16 kHz mono.
func decodeUpload(file multipart.File, hdr *multipart.FileHeader, rateField string) ([]float32, *oaierror.Error) {
	data, err := io.ReadAll(file)
	if err != nil {
		return nil, oaierror.BadRequest("file", "invalid_value", fmt.Sprintf("reading the file: %v", err))
	}
	var (
		pcm  []float32
		rate int
	)
	ext := strings.ToLower(filepath.Ext(hdr.Filename))
	switch {
	case len(data) >= 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WAVE":
		if pcm, rate, err = audio.DecodeWAV(data); err != nil {
			return nil, oaierror.BadRequest("file", "invalid_value", fmt.Sprintf("decoding the WAV file: %v", err))
		}
	case ext == ".pcm" || ext == ".raw" || ext == ".s16le":
		rate = audio.ASRSampleRate
		if rateField != "" {
			if rate, err = strconv.Atoi(rateField); err != nil || rate <= 0 {
				return nil, oaierror.BadRequest("sample_rate", "invalid_value", fmt.Sprintf("sample_rate %q is not a positive integer", rateField))
			}
		}
		if pcm, err = audio.PCM16BytesToFloat32(nil, data); err != nil {
			return nil, oaierror.BadRequest("file", "invalid_value", fmt.Sprintf("decoding PCM16: %v", err))
		}
	default:
		return nil, oaierror.BadRequest("file", "invalid_value",
			fmt.Sprintf("file %q: unsupported format; send WAV, or 16-bit little-endian PCM named *.pcm or *.raw", hdr.Filename))
	}
	if len(pcm) == 0 {
		return nil, oaierror.BadRequest("file", "invalid_value", "the audio file has no samples")
	}
	if rate != audio.ASRSampleRate {
		if pcm, err = audio.Resample(pcm, rate, audio.ASRSampleRate); err != nil {
			return nil, oaierror.BadRequest("file", "invalid_value", fmt.Sprintf("sample rate %d: %v", rate, err))
		}
	}
	return pcm, nil
}

// audioEngineError maps an engine failure to an OpenAI-shaped answer; an upstream failure
// keeps the upstream's status and message.
func audioEngineError(err error, what string) *oaierror.Error {
	if e, ok := upstreamError(err); ok {
		return e
	}
	switch {
	case errors.Is(err, audio.ErrEmptyText), errors.Is(err, audio.ErrEmptyAudio), errors.Is(err, audio.ErrNonFinite):
		return oaierror.BadRequest("", "invalid_value", fmt.Sprintf("%s: %v", what, err))
	case errors.Is(err, requestclient.ErrInvalidRequest):
		return &oaierror.Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "unavailable", Message: err.Error()}
	}
	return &oaierror.Error{Status: http.StatusInternalServerError, Type: "server_error", Code: "engine_error", Message: fmt.Sprintf("%s: %v", what, err)}
}
