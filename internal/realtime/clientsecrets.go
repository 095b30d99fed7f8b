package realtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/clientsecret"
	"github.com/omniserve/omniserve/internal/oaierror"
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/openai"
	"github.com/omniserve/omniserve/internal/session"
)

// secretsHandler is POST /v1/realtime/client_secrets.
type secretsHandler struct {
	store    *clientsecret.Store
	sessions *session.Manager
	log      *zap.Logger
}

// NewClientSecretsHandler returns POST /v1/realtime/client_secrets: it mints an "ek_" key
// (internal/clientsecret) for the session in the request, after validating that session as
// session.update would, and answers OpenAI's {value, expires_at, session}. The router's key
// check lets only the server's API key reach it (a client secret cannot mint another).
func NewClientSecretsHandler(store *clientsecret.Store, sessions *session.Manager, log *zap.Logger) http.Handler {
	if log == nil {
		log = zap.NewNop()
	}
	return &secretsHandler{store: store, sessions: sessions, log: log.Named("client_secrets")}
}

type secretsRequest struct {
	ExpiresAfter *struct {
		Anchor  *string `json:"anchor"`
		Seconds *int64  `json:"seconds"`
	} `json:"expires_after"`
	Session json.RawMessage `json:"session"`
}

func badRequest(w http.ResponseWriter, code, param, msg string) {
	oaierror.Write(w, &oaierror.Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: code, Param: param, Message: msg})
}

func (h *secretsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if clientsecret.FromContext(r.Context()) != nil {
		oaierror.Write(w, oaierror.New(http.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
			"a client secret cannot mint another; use the server's API key"))
		return
	}
	req, ttl, oerr := readSecretsRequest(r)
	if oerr != nil {
		oaierror.Write(w, oerr)
		return
	}
	patch, werr := sessionPatch(req.Session)
	if werr != nil {
		badRequest(w, werr.Code, werr.Param, werr.Message)
		return
	}
	transcription := secretIsTranscription(req.Session)
	view, err := h.sessions.Preview(session.Options{Transcription: transcription}, patch)
	if err != nil {
		var fe *session.FieldError
		if errors.As(err, &fe) {
			status := http.StatusBadRequest
			if fe.Code == "model_not_found" {
				status = http.StatusNotFound
			}
			oaierror.Write(w, &oaierror.Error{Status: status, Type: "invalid_request_error", Code: fe.Code, Param: fe.Param, Message: fe.Message})
			return
		}
		badRequest(w, "invalid_value", "session", err.Error())
		return
	}
	sec, err := h.store.Mint(ttl, req.Session)
	if err != nil {
		w.Header().Set("Retry-After", "10")
		oaierror.Write(w, oaierror.New(http.StatusTooManyRequests, "rate_limit_error", "rate_limit_exceeded", "minting a client secret: "+err.Error()))
		return
	}
	view.ID = "" // no session exists yet: the id of the preview would name nothing
	h.log.Debug("client secret minted", zap.Time("expires_at", sec.ExpiresAt))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"value": sec.Value, "expires_at": sec.ExpiresAt.Unix(), "session": openai.SessionObject(view)})
}

// readSecretsRequest reads a client secret request and its lifetime (DefaultTTL unless
// expires_after names one).
func readSecretsRequest(r *http.Request) (secretsRequest, time.Duration, *oaierror.Error) {
	var req secretsRequest
	bad := func(code, param, msg string) (secretsRequest, time.Duration, *oaierror.Error) {
		return req, 0, &oaierror.Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: code, Param: param, Message: msg}
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return req, 0, oaierror.New(http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", "the request body is too large")
		}
		return bad("invalid_body", "", "reading the request body: "+err.Error())
	}
	if len(body) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return bad("invalid_json", "", "the body is not a client secret request: "+err.Error())
		}
	}
	ttl := clientsecret.DefaultTTL
	ea := req.ExpiresAfter
	if ea == nil {
		return req, ttl, nil
	}
	if ea.Anchor != nil && *ea.Anchor != "created_at" {
		return bad("invalid_value", "expires_after.anchor", fmt.Sprintf("Invalid 'expires_after.anchor': %q; the only anchor is \"created_at\"", *ea.Anchor))
	}
	if ea.Seconds != nil {
		ttl = time.Duration(*ea.Seconds) * time.Second
		if *ea.Seconds < int64(clientsecret.MinTTL/time.Second) || *ea.Seconds > int64(clientsecret.MaxTTL/time.Second) {
			return bad("integer_out_of_range", "expires_after.seconds", fmt.Sprintf(
				"Invalid 'expires_after.seconds': %d; expected %d to %d", *ea.Seconds, int64(clientsecret.MinTTL/time.Second), int64(clientsecret.MaxTTL/time.Second)))
		}
	}
	return req, ttl, nil
}

// secretIsTranscription reports whether a client secret's session is a transcription session
// (`"type": "transcription"`): its key opens one, with or without ?intent=transcription.
func secretIsTranscription(raw json.RawMessage) bool {
	var head struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(raw, &head) == nil && head.Type == "transcription"
}

// sessionPatch decodes a session object (the "session" of a client secret request or of a
// WebRTC call's multipart form) exactly as session.update's; empty is no change.
func sessionPatch(raw json.RawMessage) (session.ConfigPatch, *WireError) {
	if len(raw) == 0 || string(raw) == "null" {
		return session.ConfigPatch{}, nil
	}
	ev, err := json.Marshal(map[string]json.RawMessage{"type": json.RawMessage(`"session.update"`), "session": raw})
	if err != nil {
		return session.ConfigPatch{}, &WireError{Code: "invalid_type", Param: "session", Message: "'session' must be an object"}
	}
	ce, werr := protocol.DecodeClientEvent(ev)
	if werr != nil {
		return session.ConfigPatch{}, werr
	}
	return openai.ConfigPatch(ce.(*protocol.SessionUpdate).Session), nil
}
