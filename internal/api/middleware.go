package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/omniserve/omniserve/internal/auth"
	"github.com/omniserve/omniserve/internal/clientsecret"
	"github.com/omniserve/omniserve/internal/oaierror"
)

// RequestIDHeader carries the request id in both directions.
const RequestIDHeader = "X-Request-Id"

type ctxKey struct{ name string }

var requestIDKey = &ctxKey{"request-id"}

// RequestIDFromContext returns the id the requestID middleware assigned, or "".
func RequestIDFromContext(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// requestID keeps a well-formed client id (so a caller can correlate logs) and makes one otherwise.
func requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(RequestIDHeader)
		if !validRequestID(id) {
			id = uuid.NewString()
		}
		w.Header().Set(RequestIDHeader, id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
	})
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// accessLog writes one line per request. Probe and scrape traffic is logged at debug level so
// that it does not drown the requests that matter.
func accessLog(log *zap.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			// The wrapper keeps http.Hijacker and http.Flusher, which WebSocket and SSE need.
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			defer func() {
				level := zapcore.InfoLevel
				switch r.URL.Path {
				case "/health", "/ready", "/metrics":
					level = zapcore.DebugLevel
				}
				ce := log.Check(level, "request")
				if ce == nil {
					return
				}
				status := ww.Status()
				if status == 0 { // hijacked (WebSocket) or nothing written
					status = http.StatusOK
				}
				ce.Write(
					zap.String("method", r.Method),
					zap.String("path", r.URL.Path),
					zap.Int("status", status),
					zap.Int("bytes", ww.BytesWritten()),
					zap.Duration("duration", time.Since(start)),
					zap.String("request_id", RequestIDFromContext(r.Context())),
					zap.String("remote", r.RemoteAddr),
				)
			}()
			next.ServeHTTP(ww, r)
		})
	}
}

// recoverer turns a handler panic into a logged 500 in OpenAI's error shape; the server keeps
// serving. http.ErrAbortHandler is re-raised: it is net/http's way to abort a response silently.
func recoverer(log *zap.Logger, count func(component string)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				rec := recover()
				if rec == nil {
					return
				}
				if rec == http.ErrAbortHandler { //nolint:errorlint // the sentinel is compared by identity in net/http too
					panic(rec)
				}
				log.Error("handler panic",
					zap.Any("panic", rec),
					zap.String("method", r.Method),
					zap.String("path", r.URL.Path),
					zap.String("request_id", RequestIDFromContext(r.Context())),
					zap.Stack("stack"))
				if count != nil {
					count("http")
				}
				if ww, ok := w.(middleware.WrapResponseWriter); ok && ww.Status() != 0 {
					return // headers already sent; the client sees a truncated response
				}
				oaierror.Write(w, oaierror.New(http.StatusInternalServerError, "server_error", "internal_error", "internal server error"))
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// limitBody bounds every request body; reading past the limit fails with *http.MaxBytesError.
func limitBody(n int64, readTimeout time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Body != nil && r.Body != http.NoBody {
				if r.ContentLength > n {
					oaierror.Write(w, oaierror.New(http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", "request body is larger than the server accepts"))
					return
				}
				r.Body = http.MaxBytesReader(w, r.Body, n)
				// A body trickling in (1 byte/s) must not hold a goroutine and a connection
				// forever: the whole body has readTimeout. The deadline is lifted at the body's
				// end, so a long SSE answer is not cut by it.
				rc := http.NewResponseController(w)
				if rc.SetReadDeadline(time.Now().Add(readTimeout)) == nil {
					r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// deadlineBody lifts the connection's read deadline once the body has been read to its end.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// requireAPIKey checks the key (clientsecret.Store.Check: the API key by auth.Check, Bearer in
// any case or the WebSocket key sub-protocol, constant time; or a live minted "ek_" client
// secret) and answers 401 in OpenAI's shape. A client secret authorises only the opening of a
// realtime connection (realtimeConnect); the request then carries it (clientsecret.FromContext).
// With no API key configured, other keys pass, but a stale "ek_" one is still refused. Each
// connection a client secret opens counts against its bound (clientsecret.Store.Open): past it,
// 429 rate_limit_exceeded.
func requireAPIKey(key string, secrets *clientsecret.Store) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sec, res := secrets.Check(r, key)
			switch {
			case res == auth.Missing:
				w.Header().Set("WWW-Authenticate", `Bearer realm="omniserve"`)
				oaierror.Write(w, oaierror.New(http.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
					"You didn't provide an API key. Send it as 'Authorization: Bearer <key>'."))
				return
			case res == auth.Invalid:
				w.Header().Set("WWW-Authenticate", `Bearer realm="omniserve", error="invalid_token"`)
				msg := "Incorrect API key provided."
				if tok, _ := auth.Presented(r); strings.HasPrefix(tok, clientsecret.Prefix) {
					msg = "The client secret is unknown or has expired; mint a new one (POST /v1/realtime/client_secrets)."
				}
				oaierror.Write(w, oaierror.New(http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", msg))
				return
			case sec != nil && !realtimeConnect(r):
				w.Header().Set("WWW-Authenticate", `Bearer realm="omniserve", error="insufficient_scope"`)
				oaierror.Write(w, oaierror.New(http.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
					"A client secret (ek_) authorises only a realtime connection (GET /v1/realtime, POST /v1/realtime/calls); use the API key."))
				return
			case sec != nil:
				if err := secrets.Open(sec.Value); err != nil {
					w.Header().Set("Retry-After", "1")
					oaierror.Write(w, oaierror.New(http.StatusTooManyRequests, "rate_limit_error", "rate_limit_exceeded",
						"This client secret has opened all the realtime sessions one key may open; mint a new one (POST /v1/realtime/client_secrets)."))
					return
				}
				r = r.WithContext(clientsecret.WithSecret(r.Context(), sec))
			}
			next.ServeHTTP(w, r)
		})
	}
}

// realtimeConnect reports the requests a client secret may make: opening a realtime session
// over a WebSocket or a WebRTC call.
func realtimeConnect(r *http.Request) bool {
	switch {
	case r.Method == http.MethodGet && (r.URL.Path == "/v1/realtime" || r.URL.Path == "/v1/duplex"):
		return true
	case r.Method == http.MethodPost && r.URL.Path == "/v1/realtime/calls":
		return true
	}
	return false
}
