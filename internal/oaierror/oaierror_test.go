package oaierror

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWrite(t *testing.T) {
	tests := []struct {
		name   string
		err    *Error
		header map[string]string
		body   string
	}{
		{"nulls when empty", New(http.StatusNotFound, "invalid_request_error", "", "no route"),
			map[string]string{"Content-Type": "application/json", "X-Content-Type-Options": "nosniff", "Retry-After": ""},
			`{"error":{"message":"no route","type":"invalid_request_error","param":null,"code":null}}`},
		{"param and code", BadRequest("messages[0].content", "invalid_value", "bad"),
			map[string]string{"Retry-After": ""},
			`{"error":{"message":"bad","type":"invalid_request_error","param":"messages[0].content","code":"invalid_value"}}`},
		{"retry after", &Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "engine_overloaded", Message: "busy", RetryAfter: 2},
			map[string]string{"Retry-After": "2"},
			`{"error":{"message":"busy","type":"rate_limit_error","param":null,"code":"engine_overloaded"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			Write(rec, tc.err)
			require.Equal(t, tc.err.Status, rec.Code)
			for k, v := range tc.header {
				require.Equal(t, v, rec.Header().Get(k), k)
			}
			require.JSONEq(t, tc.body, rec.Body.String())
			require.Equal(t, tc.err.Message, tc.err.Error())
		})
	}
}
