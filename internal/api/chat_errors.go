package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/omniserve/omniserve/internal/stage"
)

// chatAPIError is an error answered in OpenAI's shape:
// {"error":{"message","type","param","code"}}. The official clients map the HTTP status to their
// exception classes (400 BadRequestError, 404 NotFoundError, 413, 429 RateLimitError, ...), so the
// status matters as much as the body.
type chatAPIError struct {
	Status     int
	Message    string
	Type       string // invalid_request_error | rate_limit_error | server_error
	Param      string // the offending request field, "" when none
	Code       string // machine-readable detail, "" when none
	RetryAfter int    // seconds; sets the Retry-After header when > 0
}

func (e *chatAPIError) Error() string { return e.Message }

// chatBadRequest is the common 400 invalid_request_error.
func chatBadRequest(param, code, msg string) *chatAPIError {
	return &chatAPIError{Status: http.StatusBadRequest, Message: msg, Type: "invalid_request_error", Param: param, Code: code}
}

type chatErrorBody struct {
	Error chatErrorDetail `json:"error"`
}

// chatErrorDetail keeps param and code as JSON null when empty, as OpenAI does.
type chatErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *chatAPIError) body() chatErrorBody {
	d := chatErrorDetail{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		p := e.Param
		d.Param = &p
	}
	if e.Code != "" {
		c := e.Code
		d.Code = &c
	}
	return chatErrorBody{Error: d}
}

// writeChatError answers e as a JSON error response.
func writeChatError(w http.ResponseWriter, e *chatAPIError) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(e.body())
}

// upstreamError answers err as the remote stage's upstream answered it (status, type, code,
// param, message, Retry-After), or reports false when err did not come from a remote stage.
// An unreachable or garbled upstream is a 502 upstream_error, a timeout a 504.
func upstreamError(err error) (*chatAPIError, bool) {
	var ue *stage.UpstreamError
	if !errors.As(err, &ue) {
		return nil, false
	}
	return &chatAPIError{Status: ue.ClientStatus(), Type: ue.ClientType(), Code: ue.ClientCode(),
		Param: ue.ClientParam(), Message: ue.ClientMessage(), RetryAfter: ue.RetryAfter}, true
}
