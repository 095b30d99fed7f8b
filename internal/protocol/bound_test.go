package protocol

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/jsonbound"
)

func deepParams(n int) string {
	return strings.Repeat(`{"type":"object","properties":{"a":`, n) + `{"type":"string"}` + strings.Repeat("}}", n)
}

func toolsUpdate(params string) string {
	return `{"type":"session.update","session":{"tools":[{"type":"function","name":"f","parameters":` + params + `}]}}`
}

// A function tool's parameters over jsonbound.Schema are refused as they are decoded, naming
// the tool, before the tool grammar's walk sees them.
func TestToolSchemaBound(t *testing.T) {
	t.Parallel()
	for _, n := range []int{40, 2000} {
		_, e := DecodeClientEvent([]byte(toolsUpdate(deepParams(n))))
		require.NotNil(t, e, n)
		require.Equal(t, "invalid_value", e.Code)
		require.Equal(t, "session.tools[0].parameters", e.Param)
		require.Contains(t, e.Message, "nested deeper than 64")
	}
	ev, e := DecodeClientEvent([]byte(toolsUpdate(deepParams(5))))
	require.Nil(t, e)
	require.Len(t, ev.(*SessionUpdate).Session.Tools, 1)
}

// FuzzToolSchema: whatever the parameters, decoding returns, and parameters over the bound
// never come back as a tool.
func FuzzToolSchema(f *testing.F) {
	for _, s := range []string{`{}`, `{"type":"object"}`, deepParams(3), deepParams(40), `[[[[]]]]`, `{"a":"[[[{{"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, params string) {
		ev, e := DecodeClientEvent([]byte(toolsUpdate(params)))
		if e != nil {
			return
		}
		for _, tool := range ev.(*SessionUpdate).Session.Tools {
			require.NoError(t, jsonbound.Check(tool.Parameters, jsonbound.Schema))
		}
	})
}
