package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/oaierror"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// ChatClient runs one chat completion on the engine; *requestclient.Client implements it.
type ChatClient interface {
	Chat(ctx context.Context, req requestclient.ChatRequest) (*requestclient.ChatStream, error)
}

// ChatConfig configures the /v1/chat/completions handler. Zero fields take the documented defaults.
type ChatConfig struct {
	// Models lists the model names a request may name (and the error message names); empty
	// accepts any name.
	Models []string
	// AcceptModel, when set, decides instead of Models which names are accepted (aliases and
	// prefixes, internal/server's server.model_aliases).
	AcceptModel func(string) bool
	// Trace, when set, is called with each request and its completion id before it runs: the
	// request's traceparent parents the record's spans (internal/tracing).
	Trace func(r *http.Request, id string) func()
	// MaxBodyBytes caps the request body (default DefaultMaxBodyBytes, as server.max_body_bytes); larger
	// bodies get 413.
	MaxBodyBytes int64
	// MaxInFlight bounds concurrently running completions (default 64). A request beyond it gets
	// 429 with Retry-After at once instead of queueing without bound.
	MaxInFlight int
	// DefaultMaxTokens applies when the request sets neither max_tokens nor
	// max_completion_tokens (default 256).
	DefaultMaxTokens int
	// MaxTokensLimit is the largest accepted max_tokens (default 4096).
	MaxTokensLimit int
	// WriteTimeout bounds each write to the client (default 30 s); a client that stops reading
	// is dropped and its generation aborted.
	WriteTimeout time.Duration
	// RetryAfter is the Retry-After value, in seconds, of overload answers (default 1).
	RetryAfter int
	// AudioStoreBytes bounds the transcripts of audio responses kept for multi-turn audio
	// (default 16 MiB; least recently used first out). Ids expire after an hour, as OpenAI's.
	AudioStoreBytes int64
	// CountToolCall, when set, counts each tool call a reply made (omniserve_tool_calls_total).
	CountToolCall func(api string)
	// CountEngineError, when set, counts each completion that failed in the engine or a remote
	// stage by cause (requestclient.ErrorCause; omniserve_engine_errors_total), as realtime
	// sessions count theirs.
	CountEngineError func(cause string)
}

func (c *ChatConfig) withDefaults() {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 64
	}
	if c.DefaultMaxTokens <= 0 {
		c.DefaultMaxTokens = 256
	}
	if c.MaxTokensLimit <= 0 {
		c.MaxTokensLimit = 4096
	}
	if c.DefaultMaxTokens > c.MaxTokensLimit {
		c.DefaultMaxTokens = c.MaxTokensLimit
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = 1
	}
	if c.AudioStoreBytes <= 0 {
		c.AudioStoreBytes = 16 << 20
	}
}

type chatHandler struct {
	cfg    ChatConfig
	client ChatClient
	log    *zap.Logger
	slots  slots // bounded in-flight completions (one per choice)
	audio  *chatAudioStore
}

// NewChatHandler serves OpenAI-compatible POST /v1/chat/completions (JSON and SSE streaming) on
// client. log may be nil.
func NewChatHandler(cfg ChatConfig, client ChatClient, log *zap.Logger) http.Handler {
	cfg.withDefaults()
	if log == nil {
		log = zap.NewNop()
	}
	return &chatHandler{cfg: cfg, client: client, log: log.Named("chat"),
		slots: newSlots(cfg.MaxInFlight), audio: newChatAudioStore(cfg.AudioStoreBytes, chatAudioTTL)}
}

func (h *chatHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		oaierror.Write(w, &oaierror.Error{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
			Message: fmt.Sprintf("method %s is not allowed; use POST", r.Method)})
		return
	}
	if ct := r.Header.Get("Content-Type"); !isJSONMediaType(ct) {
		// Before reading the body: a form post or an upload is refused without being read.
		oaierror.Write(w, &oaierror.Error{Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error", Code: "unsupported_media_type",
			Message: fmt.Sprintf("Unsupported content type: %q. This API method only accepts 'application/json' requests.", ct)})
		return
	}
	body, apiErr := readBody(w, r, h.cfg.MaxBodyBytes)
	if apiErr != nil {
		oaierror.Write(w, apiErr)
		return
	}
	parsed, apiErr := parseChatRequest(body, &h.cfg, h.audio)
	if apiErr != nil {
		oaierror.Write(w, apiErr)
		return
	}
	// Bad requests are answered above even under load; only real work takes slots, one per
	// choice, all or none.
	release, ok := h.slots.take(parsed.N)
	if !ok {
		oaierror.Write(w, overloaded(h.cfg.RetryAfter,
			fmt.Sprintf("the engine is at its limit of %d concurrent completions; retry later", h.cfg.MaxInFlight)))
		return
	}
	defer release()
	h.serve(w, r, parsed)
}

// serve starts one engine request per choice (they decode together in the engine's batches)
// and answers them as one completion.
func (h *chatHandler) serve(w http.ResponseWriter, r *http.Request, p *chatParsed) {
	created := time.Now().Unix()
	id := newChatCompletionID()
	if h.cfg.Trace != nil {
		h.cfg.Trace(r, id) // not ended here: the record may close after the handler returns
		// The request's trace context rides on its context, so remote stages send it on.
		r = r.WithContext(propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
	}
	streams := make([]*requestclient.ChatStream, 0, p.N)
	// Close aborts a generation when the client went away or a write failed; after a normal
	// end it only releases the request.
	defer func() {
		for _, s := range streams {
			s.Close()
		}
	}()
	outs := make([]*chatOutput, p.N)
	for i := range p.N {
		req := p.Req
		req.RequestID = id // the request client makes each internal id unique
		if i > 0 && !req.Sampling.RandomSeed {
			req.Sampling.Seed += uint32(i) // seeded choices must differ from each other, reproducibly
		}
		s, err := h.client.Chat(r.Context(), req)
		if err != nil {
			h.writeEngineError(w, r, err)
			return
		}
		streams = append(streams, s)
		outs[i] = &chatOutput{index: i, id: id, model: p.Model, created: created, audio: p.WantAudio,
			format: p.AudioFormat, logprobs: p.Logprobs}
		if p.WantAudio {
			outs[i].audioID = newChatAudioID()
		}
	}
	if p.Stream {
		h.serveStream(w, r, p, streams, outs)
		return
	}
	h.serveJSON(w, r, streams, outs)
}

// writeEngineError maps a failure to start a completion to an HTTP answer.
func (h *chatHandler) writeEngineError(w http.ResponseWriter, r *http.Request, err error) {
	sampErr, isSampErr := requestclient.SamplingErrorOf(err)
	switch {
	case r.Context().Err() != nil:
		return // the client is gone; nobody reads an answer
	case errors.Is(err, requestclient.ErrNoFreeSlot), errors.Is(err, requestclient.ErrQueueFull):
		// The engine's own bounds (sequence slots, stage queues) were hit before ours.
		oaierror.Write(w, &oaierror.Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "engine_overloaded",
			RetryAfter: h.cfg.RetryAfter, Message: fmt.Sprintf("the engine is overloaded (%v); retry later", err)})
	case errors.Is(err, requestclient.ErrContextLength):
		oaierror.Write(w, contextLengthError(err))
	case isSampErr:
		oaierror.Write(w, oaierror.BadRequest(sampErr.Param, "invalid_value", sampErr.Message))
	case errors.Is(err, requestclient.ErrInvalidRequest):
		oaierror.Write(w, oaierror.BadRequest("messages", "invalid_value", err.Error()))
	default:
		oaierror.Write(w, h.engineError("", "the engine could not start the completion", err))
	}
}

// isJSONMediaType accepts application/json with any parameters (charset=utf-8).
func isJSONMediaType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// contextLengthError is OpenAI's answer to a prompt that does not fit.
func contextLengthError(err error) *oaierror.Error {
	msg := err.Error()
	if cle, ok := requestclient.ContextLengthErrorOf(err); ok {
		msg = cle.Message
	}
	return oaierror.BadRequest("messages", "context_length_exceeded", msg)
}

// newChatCompletionID returns the external id chatcmpl-<16 hex>; the request client appends
// -<8 hex> for its internal id, as vllm-omni does.
func newChatCompletionID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "chatcmpl-" + hex.EncodeToString(b[:])
}

func newChatAudioID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "audio_" + hex.EncodeToString(b[:])
}
