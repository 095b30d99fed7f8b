package jsonbound

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

func TestCheck(t *testing.T) {
	t.Parallel()
	lim := Limits{MaxBytes: 64, MaxDepth: 3}
	tests := []struct {
		name  string
		doc   string
		bound string // "" = within
	}{
		{"scalar", `1`, ""},
		{"empty", ``, ""},
		{"at depth", `{"a":[{}]}`, ""},
		{"past depth", `{"a":[{"b":[]}]}`, "depth"},
		{"brackets in strings", `{"a":"[[[[{{{{"}`, ""},
		{"escaped quote keeps the string open", `{"a":"\"[[[["}`, ""},
		{"escaped backslash closes it", `{"a":"\\", "b":[[[1]]]}`, "depth"},
		{"siblings do not add up", `[[[]],[[]],[[]]]`, ""},
		{"too long", `"` + strings.Repeat("x", 64) + `"`, "bytes"},
		{"deep arrays", nested(4990), "bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Check([]byte(tt.doc), lim)
			if tt.bound == "" {
				require.NoError(t, err)
				return
			}
			var be *Error
			require.True(t, errors.As(err, &be), "got %v", err)
			require.Equal(t, tt.bound, be.Bound)
			require.NotEmpty(t, be.Error())
		})
	}
	require.NoError(t, Check([]byte(nested(1000)), Limits{}), "zero limits bound nothing")
	require.Error(t, Check([]byte(nested(9000)), Limits{MaxDepth: 64}))
}

// FuzzCheck holds Check to encoding/json's view of depth: any valid document Check passes
// nests no deeper than the bound, and one it refuses for depth does.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{}`, `[[[]]]`, `{"a":"[{"}`, `"\\"`, `{"a":{"b":{"c":{"d":1}}}}`, nested(70)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		err := Check(doc, Limits{MaxDepth: 4})
		if !json.Valid(doc) {
			return
		}
		var v any
		require.NoError(t, json.Unmarshal(doc, &v))
		require.Equal(t, err == nil, depthOf(v) <= 4, "doc %q", doc)
	})
}

func depthOf(v any) int {
	d := 0
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			d = max(d, depthOf(e))
		}
		return d + 1
	case map[string]any:
		for _, e := range x {
			d = max(d, depthOf(e))
		}
		return d + 1
	}
	return 0
}
