package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"

	"github.com/omniserve/omniserve/internal/jsonbound"
	"github.com/omniserve/omniserve/internal/oaierror"
	"github.com/omniserve/omniserve/internal/protocol"
)

// DefaultSecretSessionBytes is RouterDeps.SecretSessionBytes's default: realtime's default
// bound on one client event, the bound session.update has.
const DefaultSecretSessionBytes = 15 << 20

// secretSessionDepth bounds a minted session's nesting: a tool's parameters schema
// (jsonbound.Schema) under session.tools[i].parameters, and room to spare.
const secretSessionDepth = jsonbound.SchemaDepth + 8

// guardClientSecrets checks the session of a client secret request before the minting
// handler decodes it, because the key keeps that session, as sent, until it expires: a session
// over maxBytes, nested deeper than secretSessionDepth, or with a top-level field no session
// has gets a 400 naming it. The body is handed on unchanged.
func guardClientSecrets(next http.Handler, maxBytes int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				oaierror.Write(w, oaierror.New(http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", "the request body is too large"))
				return
			}
			oaierror.Write(w, oaierror.BadRequest("", "invalid_body", "reading the request body: "+err.Error()))
			return
		}
		if e := checkSecretSession(body, maxBytes); e != nil {
			oaierror.Write(w, e)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// checkSecretSession is guardClientSecrets' check of one body; a body it cannot read is left
// to the handler, which answers it.
func checkSecretSession(body []byte, maxBytes int64) *oaierror.Error {
	var req struct {
		Session json.RawMessage `json:"session"`
	}
	if len(body) == 0 || json.Unmarshal(body, &req) != nil || len(req.Session) == 0 {
		return nil
	}
	if int64(len(req.Session)) > maxBytes {
		return oaierror.BadRequest("session", "invalid_value",
			fmt.Sprintf("Invalid 'session': %d bytes is more than the %d a session may hold", len(req.Session), maxBytes))
	}
	if err := jsonbound.Check(req.Session, jsonbound.Limits{MaxDepth: secretSessionDepth}); err != nil {
		return oaierror.BadRequest("session", "invalid_value", fmt.Sprintf("Invalid 'session': %v", err))
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(req.Session, &fields) != nil {
		return nil // not an object: the handler says so
	}
	var unknown []string
	for k := range fields {
		if !protocol.KnownSessionField(k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	return oaierror.BadRequest("session."+unknown[0], "unknown_parameter", fmt.Sprintf("Unknown parameter: 'session.%s'.", unknown[0]))
}
