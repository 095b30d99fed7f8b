package stage

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
)

// MeasureInput counts a duplex input as the sequence holds it: a text over the window's byte
// bound is refused unread (fast, whatever its size), one whose tokens pass the window by its
// tokens, anything else counted.
func TestMeasureInput(t *testing.T) {
	p, eng := newTestPipeline(t, nil)
	window := eng.Info().SeqContext
	require.Equal(t, window, p.InputWindow())
	words := func(n int) string { return strings.Repeat("go forward ten meters ", n/22+1)[:n] }
	tests := []struct {
		name, role, text string
		want             error // nil: counted
	}{
		{"user text", "user", "go forward ten meters", nil},
		{"tool output", "tool", `{"temperature": 21}`, nil},
		{"restored call", duplex.RoleToolCall, `{"id":"call_1","name":"lookup","arguments":"{}"}`, nil},
		{"over the window's tokens", "user", words(window * 6), ErrContextLength},
		{"over the byte bound", "user", words(window*MaxInputBytesPerToken + 1), ErrInputTooLong},
		{"10 MiB", "tool", words(10 << 20), ErrInputTooLong},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			n, err := p.MeasureInput(tc.role, tc.text)
			if tc.want == nil {
				require.NoError(t, err)
				require.Positive(t, n)
				require.Less(t, n, window)
				return
			}
			require.ErrorIs(t, err, tc.want)
			var tl *InputTooLongError
			if errors.As(err, &tl) {
				require.Equal(t, len(tc.text), tl.Bytes)
				require.Equal(t, window*MaxInputBytesPerToken, tl.Limit)
				require.Less(t, time.Since(start), 10*time.Millisecond, "refused unread")
			}
		})
	}
	// The message counts its chat template's wrapping: more than its text alone.
	n, err := p.MeasureInput("user", "go")
	require.NoError(t, err)
	alone, _, err := eng.CountTokens("go", 0)
	require.NoError(t, err)
	require.Greater(t, n, alone)
}

// MeasureTools counts the declaration the model reads; a list far over the window is refused
// before it is rendered.
func TestMeasureTools(t *testing.T) {
	p, eng := newTestPipeline(t, nil)
	tool := func(i int) duplex.Tool {
		return duplex.Tool{Name: "lookup_" + strings.Repeat("x", i%5), Description: "Looks up the weather in a city.",
			Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}}}`)}
	}
	n, err := p.MeasureTools([]duplex.Tool{tool(0)})
	require.NoError(t, err)
	require.Positive(t, n)
	many := make([]duplex.Tool, 20000)
	for i := range many {
		many[i] = tool(i)
	}
	start := time.Now()
	_, err = p.MeasureTools(many)
	require.ErrorIs(t, err, ErrInputTooLong)
	require.Less(t, time.Since(start), 50*time.Millisecond)
	_, err = p.MeasureTools(many[:40])
	require.ErrorIs(t, err, ErrContextLength, "40 tools: under the byte bound, over the %d-token window", eng.Info().SeqContext)
}
