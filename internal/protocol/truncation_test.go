package protocol

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// session.truncation decodes in its three GA shapes, refuses malformed ones with their param,
// and marshals back as the client wrote it.
func TestDecodeTruncation(t *testing.T) {
	tests := []struct {
		name, value string
		want        *Truncation
		code, param string
		echo        string // the marshalled value ("" = value)
	}{
		{name: "auto", value: `"auto"`, want: &Truncation{Type: "auto"}},
		{name: "disabled", value: `"disabled"`, want: &Truncation{Type: "disabled"}},
		{name: "null changes nothing", value: `null`},
		{name: "retention ratio", value: `{"type":"retention_ratio","retention_ratio":0.5}`, want: &Truncation{Type: "retention_ratio", RetentionRatio: 0.5}},
		{name: "retention ratio with a limit", value: `{"type":"retention_ratio","retention_ratio":0.8,"token_limits":{"post_instructions":600}}`,
			want: &Truncation{Type: "retention_ratio", RetentionRatio: 0.8, PostInstructions: 600}},
		{name: "empty token limits", value: `{"type":"retention_ratio","retention_ratio":0,"token_limits":{}}`, want: &Truncation{Type: "retention_ratio"},
			echo: `{"type":"retention_ratio","retention_ratio":0}`},
		{name: "unknown mode", value: `"sometimes"`, code: "invalid_value", param: "session.truncation"},
		{name: "number", value: `3`, code: "invalid_type", param: "session.truncation"},
		{name: "wrong type", value: `{"type":"auto","retention_ratio":0.5}`, code: "invalid_value", param: "session.truncation.type"},
		{name: "no ratio", value: `{"type":"retention_ratio"}`, code: "missing_required_parameter", param: "session.truncation.retention_ratio"},
		{name: "ratio above 1", value: `{"type":"retention_ratio","retention_ratio":1.5}`, code: "invalid_value", param: "session.truncation.retention_ratio"},
		{name: "ratio not a number", value: `{"type":"retention_ratio","retention_ratio":"half"}`, code: "invalid_type", param: "session.truncation.retention_ratio"},
		{name: "unknown field", value: `{"type":"retention_ratio","retention_ratio":0.5,"keep":3}`, code: "unknown_parameter", param: "session.truncation.keep"},
		{name: "zero limit", value: `{"type":"retention_ratio","retention_ratio":0.5,"token_limits":{"post_instructions":0}}`,
			code: "integer_below_min_value", param: "session.truncation.token_limits.post_instructions"},
		{name: "limit not an integer", value: `{"type":"retention_ratio","retention_ratio":0.5,"token_limits":{"post_instructions":1.5}}`,
			code: "invalid_type", param: "session.truncation.token_limits.post_instructions"},
		{name: "unknown limit", value: `{"type":"retention_ratio","retention_ratio":0.5,"token_limits":{"total":9}}`,
			code: "unknown_parameter", param: "session.truncation.token_limits.total"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev, err := DecodeClientEvent([]byte(`{"type":"session.update","session":{"type":"realtime","truncation":` + tt.value + `}}`))
			if tt.code != "" {
				require.NotNil(t, err)
				require.Equal(t, tt.code, err.Code, err.Message)
				require.Equal(t, tt.param, err.Param)
				return
			}
			require.Nil(t, err)
			got := ev.(*SessionUpdate).Session.Truncation
			require.Equal(t, tt.want, got)
			if got == nil {
				return
			}
			b, merr := json.Marshal(got)
			require.NoError(t, merr)
			echo := tt.echo
			if echo == "" {
				echo = tt.value
			}
			require.JSONEq(t, echo, string(b))
		})
	}
}
