package stage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
)

// RemoteStages selects remote backends per stage; a nil entry keeps the stage local. The remote
// is any OpenAI-compatible server (vLLM, SGLang, llama.cpp server, Ollama, speaches, another
// omniserve): the thinker's LLM uses POST /v1/chat/completions with streaming, the ASR
// POST /v1/audio/transcriptions, the talker's TTS POST /v1/audio/speech (pcm).
type RemoteStages struct {
	Thinker *RemoteConfig `yaml:"thinker"`
	ASR     *RemoteConfig `yaml:"asr"`
	TTS     *RemoteConfig `yaml:"tts"`
}

// RemoteConfig is one remote backend. Zero fields take the defaults written here.
type RemoteConfig struct {
	// BaseURL is the API root including /v1, e.g. "http://10.0.0.5:8000/v1" (required).
	BaseURL string `yaml:"base_url"`
	// Model is sent as "model" (required).
	Model string `yaml:"model"`
	// APIKeyEnv names the environment variable holding the bearer key ("" = no key). The key
	// itself never sits in the config file.
	APIKeyEnv string `yaml:"api_key_env"`
	// Voice is the TTS voice sent to /v1/audio/speech (default "alloy").
	Voice string `yaml:"voice"`
	// ConnectTimeout bounds the TCP connect (default 3s).
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// FirstByteTimeout bounds the time from sending a request to its response headers and, for
	// the thinker, to the first token (default 30s). An upstream that hangs is cut by it.
	FirstByteTimeout time.Duration `yaml:"first_byte_timeout"`
	// IdleTimeout bounds the gap between two chunks of a streamed response (default 30s).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// Retries is how often a request is retried on a connection error, 429 or 5xx before any
	// output arrived (default 2; -1 = never). Nothing is retried after the first token.
	Retries int `yaml:"retries"`
	// RetryBackoff is the first wait before a retry, doubled each time (default 100ms).
	RetryBackoff time.Duration `yaml:"retry_backoff"`
	// MaxConns bounds the pooled connections to the host (default 256).
	MaxConns int `yaml:"max_conns"`
}

func (c *RemoteConfig) applyDefaults() {
	if c.Voice == "" {
		c.Voice = "alloy"
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 3 * time.Second
	}
	if c.FirstByteTimeout == 0 {
		c.FirstByteTimeout = 30 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 30 * time.Second
	}
	if c.Retries == 0 {
		c.Retries = 2
	}
	if c.Retries < 0 {
		c.Retries = 0
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = 100 * time.Millisecond
	}
	if c.MaxConns == 0 {
		c.MaxConns = 256
	}
}

func (c *RemoteConfig) validate(key string) error {
	bad := func(k string, v any, msg string) error {
		return fmt.Errorf("%w: pipeline.remote.%s.%s = %v: %s", errConfig, key, k, v, msg)
	}
	if !strings.HasPrefix(c.BaseURL, "http://") && !strings.HasPrefix(c.BaseURL, "https://") {
		return bad("base_url", c.BaseURL, "want an http:// or https:// URL ending in the API root, e.g. /v1")
	}
	if c.Model == "" {
		return bad("model", `""`, "required")
	}
	if c.ConnectTimeout < 0 || c.FirstByteTimeout < 0 || c.IdleTimeout < 0 || c.RetryBackoff < 0 {
		return bad("*_timeout", "negative", "timeouts must not be negative")
	}
	if c.MaxConns < 0 {
		return bad("max_conns", c.MaxConns, "must not be negative")
	}
	return nil
}

// UpstreamError is a failure answered by (or on the way to) a remote backend. Status is the
// upstream's HTTP status (0 when none came: connection refused, reset; 504 when the front's
// own timeout cut it; 2xx when the answer was garbled); Message, Type, Code and Param are from
// its OpenAI-shaped error body when it sent one. The Client* methods say what the front's own
// client is told (see docs/DEPLOY.md, "Upstream errors").
type UpstreamError struct {
	Stage      string // "thinker", "asr" or "tts"
	URL        string
	Status     int
	Type       string
	Code       string
	Param      string
	Message    string
	RetryAfter int   // seconds, from the upstream's Retry-After header (0 when none)
	Err        error // the transport error when Status is 0
}

// passesThrough reports an upstream status the front answers with as it is: every 4xx and 5xx
// but the credential failures (401, 403, 407), which concern the front's key to the upstream,
// not its client's key to the front.
func (e *UpstreamError) passesThrough() bool {
	switch e.Status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusProxyAuthRequired:
		return false
	}
	return e.Status >= 400 && e.Status <= 599
}

// ClientStatus is the HTTP status the front answers with: the upstream's own 4xx/5xx, 504
// when the upstream timed out, 502 when it was unreachable, answered garbage, or refused
// the front's credentials.
func (e *UpstreamError) ClientStatus() int {
	if e.passesThrough() {
		return e.Status
	}
	return http.StatusBadGateway
}

// ClientType is the OpenAI error type: the upstream's when it passes through and named one.
func (e *UpstreamError) ClientType() string {
	if e.passesThrough() && e.Type != "" {
		return e.Type
	}
	switch s := e.ClientStatus(); {
	case s == http.StatusTooManyRequests:
		return "rate_limit_error"
	case s >= 400 && s < 500:
		return "invalid_request_error"
	}
	return "server_error"
}

// ClientCode is the OpenAI error code: the upstream's when it passes through and sent one
// (upstream_timeout for the front's own timeout), upstream_error otherwise.
func (e *UpstreamError) ClientCode() string {
	if e.passesThrough() && e.Code != "" {
		return e.Code
	}
	return "upstream_error"
}

// ClientParam is the upstream's param when its status passes through.
func (e *UpstreamError) ClientParam() string {
	if e.passesThrough() {
		return e.Param
	}
	return ""
}

// ClientMessage names the stage and the upstream's status and carries the upstream's message,
// but not the upstream's URL (that is in the front's log). Realtime error events have no
// HTTP status of their own, so the message is where a realtime client reads it.
func (e *UpstreamError) ClientMessage() string {
	switch {
	case !e.passesThrough() && e.Status >= 400:
		return fmt.Sprintf("remote %s refused the front's credentials (upstream status %d): %s", e.Stage, e.Status, e.Message)
	case e.Status >= 400:
		return fmt.Sprintf("remote %s (upstream status %d): %s", e.Stage, e.Status, e.Message)
	}
	return fmt.Sprintf("remote %s: %s", e.Stage, e.Message)
}

func (e *UpstreamError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("remote %s %s: %s", e.Stage, e.URL, e.Message)
	}
	return fmt.Sprintf("remote %s %s: upstream status %d: %s", e.Stage, e.URL, e.Status, e.Message)
}

func (e *UpstreamError) Unwrap() error { return e.Err }

// retryable reports a failure worth another try before any output: no answer, 429 or 5xx.
func (e *UpstreamError) retryable() bool {
	return e.Status == 0 || e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// remoteClient is the pooled HTTP client of one remote backend.
type remoteClient struct {
	stage string
	cfg   RemoteConfig
	http  *http.Client
	key   string
}

func newRemoteClient(stage string, cfg RemoteConfig) *remoteClient {
	cfg.applyDefaults() // idempotent; a config built in code may have skipped it
	d := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		MaxIdleConns:          cfg.MaxConns,
		MaxIdleConnsPerHost:   cfg.MaxConns,
		MaxConnsPerHost:       cfg.MaxConns,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: cfg.FirstByteTimeout,
		ForceAttemptHTTP2:     true,
	}
	var key string
	if cfg.APIKeyEnv != "" {
		key = os.Getenv(cfg.APIKeyEnv)
	}
	return &remoteClient{stage: stage, cfg: cfg, http: &http.Client{Transport: tr}, key: key}
}

func (c *remoteClient) url(path string) string {
	return strings.TrimRight(c.cfg.BaseURL, "/") + path
}

func (c *remoteClient) close() { c.http.CloseIdleConnections() }

// post sends body to path with its Content-Type (and Accept, when not empty), as do does.
func (c *remoteClient) post(ctx context.Context, path, ctype, accept string, body []byte) (*http.Response, error) {
	return c.do(ctx, path, func(ctx context.Context, url string) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", ctype)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		return req, nil
	})
}

// do sends one request built by mk and returns a 2xx response, retrying (with backoff) on
// retryable failures. The caller closes the body.
func (c *remoteClient) do(ctx context.Context, path string, mk func(ctx context.Context, url string) (*http.Request, error)) (*http.Response, error) {
	url := c.url(path)
	backoff := c.cfg.RetryBackoff
	for attempt := 0; ; attempt++ {
		resp, err := c.once(ctx, url, mk)
		if err == nil {
			return resp, nil
		}
		var ue *UpstreamError
		if ctx.Err() != nil || !errors.As(err, &ue) || !ue.retryable() || attempt >= c.cfg.Retries {
			return nil, err
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting to retry %s: %w", url, ctx.Err())
		}
		backoff *= 2
	}
}

func (c *remoteClient) once(ctx context.Context, url string, mk func(ctx context.Context, url string) (*http.Request, error)) (*http.Response, error) {
	req, err := mk(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("building request to %s: %w", url, err)
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	// The caller's W3C trace context, when ctx carries one, so a remote omniserve or vLLM joins
	// the trace (nothing is written without one).
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("calling %s: %w", url, ctx.Err())
		}
		return nil, &UpstreamError{Stage: c.stage, URL: url, Message: transportMessage(err), Err: err}
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	ue := upstreamErrorFrom(c.stage, url, resp.StatusCode, body)
	if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s > 0 {
		ue.RetryAfter = s
	}
	return nil, ue
}

// transportMessage is a transport error without the request line *url.Error prefixes (the
// URL is in UpstreamError.URL; clients of the front are not told it).
func transportMessage(err error) string {
	var uerr *neturl.Error
	if errors.As(err, &uerr) {
		return uerr.Err.Error()
	}
	return err.Error()
}

// upstreamErrorFrom reads an OpenAI-shaped error body, or keeps the raw text.
func upstreamErrorFrom(stage, url string, status int, body []byte) *UpstreamError {
	e := &UpstreamError{Stage: stage, URL: url, Status: status}
	var env struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
			Param   any    `json:"param"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && env.Error != nil {
		e.Message, e.Type = env.Error.Message, env.Error.Type
		if env.Error.Code != nil {
			e.Code = fmt.Sprint(env.Error.Code)
		}
		if env.Error.Param != nil {
			e.Param = fmt.Sprint(env.Error.Param)
		}
	} else {
		e.Message = strings.TrimSpace(string(bytes.ToValidUTF8(body, nil)))
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	return e
}

// watchdog cancels a request whose stream stays silent for longer than the current limit:
// the first-byte timeout until the first chunk, the idle timeout between chunks.
type watchdog struct {
	t      *time.Timer
	cancel context.CancelCauseFunc
	idle   time.Duration
}

// errUpstreamTimeout is the cause of a request cut by its watchdog.
var errUpstreamTimeout = errors.New("upstream timed out")

func newWatchdog(parent context.Context, first, idle time.Duration) (context.Context, *watchdog) {
	ctx, cancel := context.WithCancelCause(parent)
	w := &watchdog{cancel: cancel, idle: idle}
	w.t = time.AfterFunc(first, func() { cancel(errUpstreamTimeout) })
	return ctx, w
}

// kick restarts the idle limit after a chunk arrived.
func (w *watchdog) kick() { w.t.Reset(w.idle) }

func (w *watchdog) stop() {
	w.t.Stop()
	w.cancel(nil)
}

// timeoutError turns a watchdog cut into an UpstreamError (status 504) and leaves other
// errors alone.
func timeoutError(ctx context.Context, stage, url string, err error) error {
	if errors.Is(context.Cause(ctx), errUpstreamTimeout) {
		return &UpstreamError{Stage: stage, URL: url, Status: http.StatusGatewayTimeout,
			Type: "server_error", Code: "upstream_timeout", Message: "upstream timed out", Err: errUpstreamTimeout}
	}
	return err
}
