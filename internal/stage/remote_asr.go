package stage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"strings"
	"sync"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/speech"
)

// asrBackend is what stage 0 needs of a speech recognizer: the local pocketsphinx pool
// (localASR) or a remote /v1/audio/transcriptions (remoteASR).
type asrBackend interface {
	NewStream(ctx context.Context) (asrStream, error)
	Transcribe(ctx context.Context, pcm16k []float32) (string, error)
}

// asrStream is one utterance-at-a-time recognizer of a duplex stream.
type asrStream interface {
	Write(pcm16k []float32) error
	Finish() (string, error)
	Close()
}

// logprobFinisher is an asrStream that can also give each word's log posterior with the final
// transcript (*speech.ASRStream; a remote ASR's answer has none).
type logprobFinisher interface {
	FinishLogprobs() (string, []audio.WordLogprob, error)
}

// ttsBackend is what the talker needs of a synthesizer; *speech.TTS and remoteTTS have it.
type ttsBackend interface {
	Synthesize(ctx context.Context, text string) ([]float32, error)
	OutputRate() int
}

// localASR adapts *speech.ASR, whose NewStream returns its concrete stream type.
type localASR struct{ a *speech.ASR }

var _ logprobFinisher = (*speech.ASRStream)(nil)

func (l localASR) NewStream(ctx context.Context) (asrStream, error) { return l.a.NewStream(ctx) }

func (l localASR) Transcribe(ctx context.Context, pcm16k []float32) (string, error) {
	return l.a.Transcribe(ctx, pcm16k)
}

// remoteASR transcribes on an OpenAI-compatible /v1/audio/transcriptions. The API is
// utterance-at-a-time, so a stream buffers the utterance's audio and posts it as WAV on Finish:
// the remote ASR costs one request per user turn, sent at the VAD endpoint.
type remoteASR struct{ c *remoteClient }

func newRemoteASR(cfg RemoteConfig) *remoteASR {
	return &remoteASR{c: newRemoteClient("asr", cfg)}
}

func (r *remoteASR) NewStream(ctx context.Context) (asrStream, error) {
	return &remoteASRStream{r: r, ctx: ctx}, nil
}

// Transcribe posts one utterance and returns its text.
func (r *remoteASR) Transcribe(ctx context.Context, pcm16k []float32) (string, error) {
	if len(pcm16k) == 0 {
		return "", fmt.Errorf("transcribing: %w", audio.ErrEmptyAudio)
	}
	if err := audio.CheckFinite(pcm16k); err != nil {
		return "", fmt.Errorf("transcribing: %w", err)
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("model", r.c.cfg.Model)
	_ = mw.WriteField("response_format", "json")
	fw, err := mw.CreateFormFile("file", "audio.wav")
	if err != nil {
		return "", fmt.Errorf("building transcription request: %w", err)
	}
	if _, err := fw.Write(audio.EncodeWAV(pcm16k, audio.ASRSampleRate)); err != nil {
		return "", fmt.Errorf("building transcription request: %w", err)
	}
	if err := mw.Close(); err != nil {
		return "", fmt.Errorf("building transcription request: %w", err)
	}
	raw, ctype := body.Bytes(), mw.FormDataContentType()
	wctx, wd := newWatchdog(ctx, r.c.cfg.FirstByteTimeout, r.c.cfg.IdleTimeout)
	defer wd.stop()
	url := r.c.url("/audio/transcriptions")
	resp, err := r.c.post(wctx, "/audio/transcriptions", ctype, "", raw)
	if err != nil {
		return "", fmt.Errorf("transcribing: %w", timeoutError(wctx, "asr", url, err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("transcribing: %w", timeoutError(wctx, "asr", url,
			&UpstreamError{Stage: "asr", URL: url, Message: "reading answer: " + err.Error(), Err: err}))
	}
	var out struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return "", fmt.Errorf("transcribing: %w", &UpstreamError{Stage: "asr", URL: url, Status: resp.StatusCode,
			Message: fmt.Sprintf("answer is not a transcription: %v", err)})
	}
	return strings.TrimSpace(out.Text), nil
}

// remoteASRStream buffers one utterance. Its methods are serialized by the caller (the duplex
// stream's audio lock); the mutex guards Close from another goroutine. The duplex stream uses
// Cut, not Finish, so that the upstream call is made outside its audio lock.
type remoteASRStream struct {
	r   *remoteASR
	ctx context.Context //nolint:containedctx // the stream's lifetime; Finish has no ctx of its own

	mu     sync.Mutex
	buf    []float32
	closed bool
}

func (s *remoteASRStream) Write(pcm16k []float32) error {
	if err := audio.CheckFinite(pcm16k); err != nil {
		return fmt.Errorf("writing asr audio: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("writing asr audio: %w", speech.ErrClosed)
	}
	s.buf = append(s.buf, pcm16k...)
	return nil
}

func (s *remoteASRStream) Finish() (string, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", fmt.Errorf("finishing utterance: %w", speech.ErrClosed)
	}
	pcm := s.buf
	s.buf = nil
	s.mu.Unlock()
	if len(pcm) == 0 {
		return "", fmt.Errorf("finishing utterance: %w", audio.ErrEmptyAudio)
	}
	return s.r.Transcribe(s.ctx, pcm)
}

// Cut takes the utterance's audio and returns its transcription call (asrCutter): the
// duplex stream makes the call outside its audio lock.
func (s *remoteASRStream) Cut() (func(ctx context.Context) (string, error), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("finishing utterance: %w", speech.ErrClosed)
	}
	pcm := s.buf
	s.buf = nil
	if len(pcm) == 0 {
		return nil, fmt.Errorf("finishing utterance: %w", audio.ErrEmptyAudio)
	}
	return func(ctx context.Context) (string, error) { return s.r.Transcribe(ctx, pcm) }, nil
}

func (s *remoteASRStream) Close() {
	s.mu.Lock()
	s.closed, s.buf = true, nil
	s.mu.Unlock()
}
