package api

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/oaierror"
)

// Synthesizer speaks text as mono samples at SpeechRate; the stage pipeline implements it on the
// talker's TTS, local or remote.
type Synthesizer interface {
	Synthesize(ctx context.Context, text string) ([]float32, error)
	SpeechRate() int
}

// openAIPCMRate is the rate OpenAI defines for response_format "pcm": 24 kHz, 16-bit LE, mono.
const openAIPCMRate = 24000

type speechHandler struct {
	audioEndpoint
	tts Synthesizer
}

// NewSpeechHandler serves OpenAI's POST /v1/audio/speech: JSON {model, input, voice,
// response_format wav|pcm (default wav: this server has no mp3 encoder), speed 1}. The audio
// is streamed with chunked encoding, sentence by sentence as it is synthesized: pcm is raw
// 24 kHz 16-bit LE mono as OpenAI defines it; wav is a WAV header with unknown length followed
// by samples at the talker's rate. log may be nil.
func NewSpeechHandler(cfg AudioConfig, tts Synthesizer, log *zap.Logger) http.Handler {
	return &speechHandler{audioEndpoint: newAudioEndpoint(cfg, log), tts: tts}
}

type speechRequest struct {
	Model          string   `json:"model"`
	Input          *string  `json:"input"`
	Voice          any      `json:"voice"` // a name, or {"id": ...} in newer SDKs; any voice is accepted
	ResponseFormat string   `json:"response_format"`
	Speed          *float64 `json:"speed"`
	Instructions   string   `json:"instructions"`
	StreamFormat   string   `json:"stream_format"`
}

func (h *speechHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, apiErr := readBody(w, r, h.cfg.MaxBodyBytes)
	if apiErr != nil {
		oaierror.Write(w, apiErr)
		return
	}
	req, apiErr := h.parse(body)
	if apiErr != nil {
		oaierror.Write(w, apiErr)
		return
	}
	release, ok := h.take(w, "syntheses")
	if !ok {
		return
	}
	defer release()
	h.stream(w, r, req)
}

func (h *speechHandler) parse(body []byte) (*speechRequest, *oaierror.Error) {
	var req speechRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, oaierror.BadRequest("", "invalid_json", fmt.Sprintf("the body is not valid JSON: %v", err))
	}
	switch {
	case strings.TrimSpace(req.Model) == "":
		return nil, oaierror.BadRequest("model", "missing_required_parameter", "you must provide a model parameter")
	case req.Input == nil:
		return nil, oaierror.BadRequest("input", "missing_required_parameter", "you must provide an input parameter")
	case !speakableText(*req.Input):
		return nil, oaierror.BadRequest("input", "invalid_value", "input has nothing to speak (no letters or digits)")
	case len([]rune(*req.Input)) > h.cfg.MaxInputChars:
		return nil, oaierror.BadRequest("input", "string_above_max_length",
			fmt.Sprintf("input is longer than %d characters", h.cfg.MaxInputChars))
	case req.Speed != nil && *req.Speed != 1:
		return nil, oaierror.BadRequest("speed", "unsupported_value", "only speed 1.0 is supported")
	case req.StreamFormat != "" && req.StreamFormat != "audio":
		return nil, oaierror.BadRequest("stream_format", "unsupported_value", `only stream_format "audio" is supported`)
	}
	switch req.ResponseFormat {
	case "":
		req.ResponseFormat = "wav"
	case "wav", "pcm":
	default:
		return nil, oaierror.BadRequest("response_format", "unsupported_value",
			fmt.Sprintf("response_format %q is not supported; use wav or pcm", req.ResponseFormat))
	}
	return &req, nil
}

// stream synthesizes sentence by sentence and writes each as soon as it is ready. A failure
// before the first byte is an OpenAI error; after it the response is cut (the client sees a
// truncated chunked body, never a WAV that pretends to be complete).
func (h *speechHandler) stream(w http.ResponseWriter, r *http.Request, req *speechRequest) {
	ctx := r.Context()
	rate := h.tts.SpeechRate()
	outRate := rate
	if req.ResponseFormat == "pcm" {
		outRate = openAIPCMRate
	}
	flusher, _ := w.(http.Flusher)
	started := false
	var buf []byte
	for _, sentence := range splitSentences(*req.Input) {
		pcm, err := h.tts.Synthesize(ctx, sentence)
		if errors.Is(err, audio.ErrEmptyText) {
			continue // a piece flite cannot voice (symbols only)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			h.log.Warn("speech synthesis failed", zap.Bool("started", started), zap.Error(err))
			if !started {
				oaierror.Write(w, audioEngineError(err, "the synthesis failed"))
				return
			}
			panic(http.ErrAbortHandler) // cut the stream: the audio is incomplete
		}
		if outRate != rate {
			if pcm, err = audio.Resample(pcm, rate, outRate); err != nil {
				h.log.Error("resampling speech", zap.Error(err))
				panic(http.ErrAbortHandler)
			}
		}
		if !started {
			started = true
			if req.ResponseFormat == "wav" {
				w.Header().Set("Content-Type", "audio/wav")
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write(streamingWAVHeader(outRate))
			} else {
				w.Header().Set("Content-Type", "audio/pcm")
				w.WriteHeader(http.StatusOK)
			}
		}
		buf = audio.Float32ToPCM16Bytes(buf, pcm)
		if _, err := w.Write(buf); err != nil {
			return // the client went away
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
	if !started {
		oaierror.Write(w, oaierror.BadRequest("input", "invalid_value", "input has nothing this voice can speak"))
	}
}

// streamingWAVHeader is a 16-bit mono PCM WAV header whose sizes say "unknown" (0xFFFFFFFF),
// as streaming servers send it; decoders read to the end of the body.
func streamingWAVHeader(rate int) []byte {
	b := make([]byte, 44)
	copy(b[0:], "RIFF")
	binary.LittleEndian.PutUint32(b[4:], 0xFFFFFFFF)
	copy(b[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(b[16:], 16)
	binary.LittleEndian.PutUint16(b[20:], 1) // PCM
	binary.LittleEndian.PutUint16(b[22:], 1) // mono
	binary.LittleEndian.PutUint32(b[24:], uint32(rate))
	binary.LittleEndian.PutUint32(b[28:], uint32(rate*2))
	binary.LittleEndian.PutUint16(b[32:], 2)
	binary.LittleEndian.PutUint16(b[34:], 16)
	copy(b[36:], "data")
	binary.LittleEndian.PutUint32(b[40:], 0xFFFFFFFF)
	return b
}

// splitSentences cuts text after sentence punctuation, so the first sentence is voiced (and
// sent) while the rest waits; very long sentences are cut at a comma or space near 200 runes.
func splitSentences(text string) []string {
	const maxRunes = 200
	var out []string
	var cur []rune
	flush := func() {
		if s := strings.TrimSpace(string(cur)); s != "" {
			out = append(out, s)
		}
		cur = cur[:0]
	}
	rs := []rune(text)
	for i, c := range rs {
		cur = append(cur, c)
		atEnd := i+1 == len(rs) || unicode.IsSpace(rs[i+1])
		switch {
		case strings.ContainsRune(".!?;", c) && atEnd:
			flush()
		case len(cur) >= maxRunes && (c == ',' || unicode.IsSpace(c)):
			flush()
		}
	}
	flush()
	return out
}

func speakableText(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) })
}
