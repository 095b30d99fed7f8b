package auth

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		key     string
		headers map[string][]string
		want    Result
	}{
		{"no key configured", "", nil, OK},
		{"bearer", "k1", map[string][]string{"Authorization": {"Bearer k1"}}, OK},
		{"bearer any case", "k1", map[string][]string{"Authorization": {"bearer k1"}}, OK},
		{"bearer upper case, spaces", "k1", map[string][]string{"Authorization": {"  BEARER   k1 "}}, OK},
		{"wrong key", "k1", map[string][]string{"Authorization": {"Bearer k2"}}, Invalid},
		{"prefix of the key", "k1", map[string][]string{"Authorization": {"Bearer k"}}, Invalid},
		{"other scheme", "k1", map[string][]string{"Authorization": {"Basic azE="}}, Invalid},
		{"header without scheme", "k1", map[string][]string{"Authorization": {"k1"}}, Invalid},
		{"missing", "k1", nil, Missing},
		{"subprotocol", "k1", map[string][]string{"Sec-WebSocket-Protocol": {"realtime, openai-insecure-api-key.k1"}}, OK},
		{"subprotocol second line", "k1", map[string][]string{"Sec-WebSocket-Protocol": {"realtime", "openai-insecure-api-key.k1"}}, OK},
		{"subprotocol wrong", "k1", map[string][]string{"Sec-WebSocket-Protocol": {"openai-insecure-api-key.k9"}}, Invalid},
		{"subprotocol without key", "k1", map[string][]string{"Sec-WebSocket-Protocol": {"realtime"}}, Missing},
		{"header wins over subprotocol", "k1", map[string][]string{"Authorization": {"Bearer k2"}, "Sec-WebSocket-Protocol": {"openai-insecure-api-key.k1"}}, Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/v1/realtime", nil)
			for k, vs := range tt.headers {
				for _, v := range vs {
					r.Header.Add(k, v)
				}
			}
			require.Equal(t, tt.want, Check(r, tt.key))
		})
	}
}
