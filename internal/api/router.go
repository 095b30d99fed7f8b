// Package api is omniserve's HTTP surface: the chi router, its middleware, the probe and model
// endpoints, /metrics, and the mount points of the chat completions and realtime handlers.
package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/api/console"
	"github.com/omniserve/omniserve/internal/clientsecret"
	"github.com/omniserve/omniserve/internal/oaierror"
)

// DefaultMaxBodyBytes bounds a request body when RouterDeps.MaxBodyBytes is zero. Chat requests
// may carry base64 audio, so it is generous.
const DefaultMaxBodyBytes = 64 << 20

// RouterDeps is everything the router serves. Nil handlers answer 503 in OpenAI's error shape,
// so the server can start (and tests can run) before every component exists.
type RouterDeps struct {
	Log *zap.Logger
	// APIKey, when set, is required as "Authorization: Bearer <key>" on /v1/*. The probes and
	// /metrics stay open, as vLLM's --api-key leaves them.
	APIKey string
	// Ready reports whether the model is loaded and the pipeline is up; false while draining.
	// Nil means never ready.
	Ready func() bool
	// Draining reports that the server is shutting down: /ready answers 503 {"status":
	// "draining"} and new chat requests, realtime sessions and sidebands get 503 shutting_down, while the
	// listener stays up for probes and in-flight work. Nil means never.
	Draining func() bool
	// Models are the ids listed by /v1/models.
	Models []string
	// AcceptModel, when set, also answers /v1/models/{id} for names it accepts that are not
	// listed (prefix aliases, server.model_aliases).
	AcceptModel func(string) bool
	// Chat serves POST /v1/chat/completions; Realtime serves GET /v1/realtime; Metrics serves
	// GET /metrics (nil: not mounted).
	Chat, Realtime, Metrics http.Handler
	// Transcriptions serves POST /v1/audio/transcriptions, Speech POST /v1/audio/speech
	// (NewTranscriptionsHandler, NewSpeechHandler; nil: 503).
	Transcriptions, Speech http.Handler
	// MaxBodyBytes bounds every request body (0 = DefaultMaxBodyBytes). A handler that reads past
	// it gets an *http.MaxBytesError and should answer 413.
	MaxBodyBytes int64
	// BodyReadTimeout bounds the reading of a whole request body (0 = DefaultBodyReadTimeout); a
	// slower client gets its connection closed.
	BodyReadTimeout time.Duration
	// CORSOrigins are the browser origins allowed to call /v1 from their pages: exact origins or
	// "*" (server.cors_origins, SplitOrigins); empty answers no cross-origin request.
	CORSOrigins []string
	// Secrets are the minted client secrets ("ek_" keys) the key check accepts for a realtime
	// connection; ClientSecrets serves POST /v1/realtime/client_secrets (nil: 503).
	Secrets       *clientsecret.Store
	ClientSecrets http.Handler
	// SecretSessionBytes bounds the session of a client secret request, which the key keeps
	// until it expires (0 = DefaultSecretSessionBytes); deeper nesting and unknown top-level
	// fields are refused too (guardClientSecrets).
	SecretSessionBytes int64
	// Calls serves the WebRTC transport: POST /v1/realtime/calls and
	// /v1/realtime/calls/{id}/hangup, GPT-Live's POST /v1/live/sessions and GET
	// /v1/live/sessions/{id}/attach (nil: 503).
	Calls http.Handler
	// CountPanic counts a handler panic the router recovered (nil: not counted).
	CountPanic func(component string)
}

// DefaultBodyReadTimeout is RouterDeps.BodyReadTimeout's default: 64 MiB at ~2.5 MB/s.
const DefaultBodyReadTimeout = 30 * time.Second

// NewRouter builds the HTTP handler of the server.
func NewRouter(d RouterDeps) http.Handler {
	log := d.Log
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("api")
	maxBody := d.MaxBodyBytes
	if maxBody <= 0 {
		maxBody = DefaultMaxBodyBytes
	}

	r := chi.NewRouter()
	// Order matters: the request id is set before anything logs, the access log wraps recover
	// so a recovered panic is logged with its 500.
	bodyTimeout := d.BodyReadTimeout
	if bodyTimeout <= 0 {
		bodyTimeout = DefaultBodyReadTimeout
	}
	r.Use(requestID, accessLog(log), recoverer(log, d.CountPanic), limitBody(maxBody, bodyTimeout))
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		oaierror.Write(w, oaierror.New(http.StatusNotFound, "invalid_request_error", "not_found", "no route for "+r.Method+" "+r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		oaierror.Write(w, oaierror.New(http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path))
	})

	r.Get("/health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	draining := func() bool { return d.Draining != nil && d.Draining() }
	r.Get("/ready", func(w http.ResponseWriter, _ *http.Request) {
		if draining() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
			return
		}
		if d.Ready != nil && d.Ready() {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
			return
		}
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
	})
	if d.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", d.Metrics)
	}

	// The browser console: public like the probes (it holds no data); its WebSocket is /v1.
	con := console.Handler()
	r.Method(http.MethodGet, "/", con)
	r.Method(http.MethodGet, "/console/*", con)

	created := time.Now().Unix()
	r.Route("/v1", func(r chi.Router) {
		r.Use(cors(d.CORSOrigins)) // before the key check: a preflight carries no key
		if d.APIKey != "" || d.Secrets != nil {
			r.Use(requireAPIKey(d.APIKey, d.Secrets))
		}
		r.Get("/models", modelsHandler(d.Models, created))
		// A wildcard, not {id}: model ids may contain slashes (org/name), as OpenAI's and vLLM's do.
		r.Get("/models/*", modelHandler(d.Models, d.AcceptModel, created))
		r.Method(http.MethodPost, "/chat/completions", refuseWhile(draining, orUnavailable(d.Chat, "chat completions")))
		r.Method(http.MethodGet, "/realtime", refuseWhile(draining, orUnavailable(d.Realtime, "the realtime API")))
		// vllm-omni's other name of /v1/realtime?duplex=1 (docs/REALTIME.md, "vllm-omni duplex dialect").
		r.Method(http.MethodGet, "/duplex", refuseWhile(draining, orUnavailable(d.Realtime, "the realtime API")))
		// GPT-Live's primary WebSocket: a duplex session in the Live dialect (docs/LIVE.md).
		r.Method(http.MethodGet, "/live/sessions", refuseWhile(draining, orUnavailable(d.Realtime, "the realtime API")))
		calls := orUnavailable(d.Calls, "WebRTC calls")
		r.Method(http.MethodPost, "/realtime/calls", refuseWhile(draining, guardCallOffer(calls)))
		r.Method(http.MethodPost, "/realtime/calls/{id}/hangup", calls)
		// GPT-Live over WebRTC and its sideband: the calls' WebRTC stack (docs/LIVE.md). The JSON
		// body has a multipart call's bound; the SDP in it, an application/sdp offer's.
		r.Method(http.MethodPost, "/live/sessions", refuseWhile(draining, guardCallOffer(calls)))
		// A sideband joins a session that exists, but it is a new connection all the same: while
		// draining it is refused as a new session is (the /v1/realtime?call_id= sideband is, by
		// the route above), so the connections that a shutdown waits for only go down.
		r.Method(http.MethodGet, "/live/sessions/{id}/attach", refuseWhile(draining, calls))
		secretBytes := d.SecretSessionBytes
		if secretBytes <= 0 {
			secretBytes = DefaultSecretSessionBytes
		}
		mint := d.ClientSecrets
		if mint != nil {
			mint = guardClientSecrets(mint, secretBytes)
		}
		r.Method(http.MethodPost, "/realtime/client_secrets", refuseWhile(draining, orUnavailable(mint, "client secrets")))
		r.Method(http.MethodPost, "/audio/transcriptions", refuseWhile(draining, orUnavailable(d.Transcriptions, "audio transcriptions")))
		r.Method(http.MethodPost, "/audio/speech", refuseWhile(draining, orUnavailable(d.Speech, "audio speech")))
	})
	return r
}

// orUnavailable returns h, or a handler answering 503 when the component is not configured.
func orUnavailable(h http.Handler, what string) http.Handler {
	if h != nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		oaierror.Write(w, oaierror.New(http.StatusServiceUnavailable, "server_error", "unavailable", what+" is not available on this server"))
	})
}

// ErrShuttingDown is the cause the server cancels request contexts with when its shutdown
// timeout cuts them; handlers that can still write tell the client (an SSE error chunk).
var ErrShuttingDown = errors.New("server is shutting down")

// refuseWhile answers 503 shutting_down instead of starting new work while draining() holds.
func refuseWhile(draining func() bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if draining() {
			w.Header().Set("Connection", "close")
			oaierror.Write(w, oaierror.New(http.StatusServiceUnavailable, "server_error", "shutting_down", "the server is shutting down; retry on another replica"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

type modelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func modelsHandler(models []string, created int64) http.HandlerFunc {
	list := modelList{Object: "list", Data: make([]modelCard, 0, len(models))}
	for _, m := range models {
		list.Data = append(list.Data, modelCard{ID: m, Object: "model", Created: created, OwnedBy: "omniserve"})
	}
	return func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, list) }
}

// modelHandler serves GET /v1/models/{id}: the model object, or 404 model_not_found as OpenAI
// answers (the SDKs raise NotFoundError).
func modelHandler(models []string, accept func(string) bool, created int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "*")
		if slices.Contains(models, id) || (accept != nil && accept(id)) {
			writeJSON(w, http.StatusOK, modelCard{ID: id, Object: "model", Created: created, OwnedBy: "omniserve"})
			return
		}
		oaierror.Write(w, &oaierror.Error{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model",
			Code: "model_not_found", Message: fmt.Sprintf("The model `%s` does not exist", id)})
	}
}
