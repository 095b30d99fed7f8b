// Package oaierror is the one writer of OpenAI's HTTP error shape,
// {"error":{"message","type","param","code"}}, for every endpoint: the /v1 API, the realtime
// endpoint's refusals before the upgrade, and the error chunk of a streamed chat. The official
// SDKs pick their exception class from the HTTP status (400 BadRequestError, 401, 404, 413,
// 429 RateLimitError, 5xx) and read message and code from the body, so both matter.
package oaierror

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Error is an error answered in OpenAI's shape.
type Error struct {
	Status     int
	Message    string
	Type       string // invalid_request_error | rate_limit_error | server_error | …
	Param      string // the offending request field, "" when none (JSON null)
	Code       string // machine-readable detail, "" when none (JSON null)
	RetryAfter int    // seconds; sets the Retry-After header when > 0
}

func (e *Error) Error() string { return e.Message }

// New is an error with no param.
func New(status int, typ, code, msg string) *Error {
	return &Error{Status: status, Type: typ, Code: code, Message: msg}
}

// BadRequest is the common 400 invalid_request_error.
func BadRequest(param, code, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Message: msg, Type: "invalid_request_error", Param: param, Code: code}
}

// Body is the JSON envelope.
type Body struct {
	Error Detail `json:"error"`
}

// Detail keeps param and code as JSON null when empty, as OpenAI does.
type Detail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// Body is e's JSON envelope (also the error chunk of a streamed response).
func (e *Error) Body() Body {
	d := Detail{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		p := e.Param
		d.Param = &p
	}
	if e.Code != "" {
		c := e.Code
		d.Code = &c
	}
	return Body{Error: d}
}

// Write answers e as a JSON error response.
func Write(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(e.Body())
}
