package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/omniserve/omniserve/internal/oaierror"
)

// slots bounds an endpoint's in-flight work: one slot per unit of work (a synthesis, a
// transcription, a chat choice); a request that finds too few free is refused, not queued.
type slots chan struct{}

func newSlots(n int) slots { return make(slots, n) }

// take takes n slots, all or none: ok is false, and nothing is held, when fewer are free. The
// caller calls release once it is done with what it took.
func (s slots) take(n int) (release func(), ok bool) {
	taken := 0
	release = func() {
		for range taken {
			<-s
		}
	}
	for taken < n {
		select {
		case s <- struct{}{}:
			taken++
		default:
			release()
			return nil, false
		}
	}
	return release, true
}

// overloaded is the 429 answer to a request that found no free slot; message says which limit.
func overloaded(retryAfter int, message string) *oaierror.Error {
	return &oaierror.Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "engine_overloaded",
		RetryAfter: retryAfter, Message: message}
}

// readBody reads a request body of at most limit bytes; past the limit it answers 413.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *oaierror.Error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return nil, bodyError(err, limit, "reading the request body")
	}
	return body, nil
}

// bodyError is the answer to a request body that could not be read: 413 past limit (the
// MaxBytesReader's error), else 400 invalid_body saying what was being read.
func bodyError(err error, limit int64, reading string) *oaierror.Error {
	if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
		return &oaierror.Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
			Code: "request_too_large", Message: fmt.Sprintf("request body exceeds the limit of %d bytes", limit)}
	}
	return oaierror.BadRequest("", "invalid_body", fmt.Sprintf("%s: %v", reading, err))
}
