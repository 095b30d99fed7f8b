package session

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/requestclient"
	"github.com/omniserve/omniserve/internal/stage"
)

// fakeMeter measures a text as one token per byte over a window, refusing by size past 4 bytes a
// token, as the pipeline does past its bound.
type fakeMeter struct{ window int }

func (f fakeMeter) InputWindow() int { return f.window }

func (f fakeMeter) MeasureInput(_, text string) (int, error) {
	if len(text) > 4*f.window {
		return 0, &stage.InputTooLongError{Bytes: len(text), Limit: 4 * f.window}
	}
	if len(text) > f.window {
		return len(text), &stage.ContextLengthError{PromptTokens: len(text), Limit: f.window}
	}
	return len(text), nil
}

func (f fakeMeter) MeasureTools(tools []duplex.Tool) (int, error) {
	return f.MeasureInput("system", string(make([]byte, 10*len(tools))))
}

var _ inputMeter = fakeMeter{}

func TestAdmitText(t *testing.T) {
	text := func(n int) string { return string(make([]byte, n)) }
	tests := []struct {
		name    string
		rule    admitRule
		pending int
		text    string
		code    string // "" admitted
		taken   int
	}{
		{"within", admitRule{meter: fakeMeter{1000}, reply: 100}, 0, text(500), "", 500},
		{"no meter: nothing measured", admitRule{}, 0, text(1 << 20), "", 0},
		{"by size", admitRule{meter: fakeMeter{1000}, reply: 100}, 0, text(5000), "string_above_max_length", 0},
		{"by tokens over the window", admitRule{meter: fakeMeter{1000}, reply: 100}, 0, text(1500), "context_length_exceeded", 0},
		{"over the room a reply leaves", admitRule{meter: fakeMeter{1000}, reply: 100}, 0, text(950), "context_length_exceeded", 0},
		{"a reply's room is at most a quarter", admitRule{meter: fakeMeter{1000}, reply: 4096}, 0, text(750), "", 750},
		{"past the budget with what is pending", admitRule{meter: fakeMeter{1000}, reply: 100}, 600, text(400), "context_length_exceeded", 0},
		{"a configured budget", admitRule{meter: fakeMeter{1000}, reply: 100, budget: 300}, 0, text(400), "context_length_exceeded", 0},
		{"a budget above the room", admitRule{meter: fakeMeter{1000}, reply: 100, budget: 5000}, 800, text(800), "", 800},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := prefillBudget{pending: tc.pending}
			n, fe := measureText(tc.rule, "item.output", "tool", tc.text)
			if fe == nil {
				fe = b.take(tc.rule, "item.output", n)
			}
			if tc.code == "" {
				require.Nil(t, fe)
				require.Equal(t, tc.pending+tc.taken, b.pending)
				return
			}
			require.NotNil(t, fe)
			require.Equal(t, tc.code, fe.Code, fe.Message)
			require.Equal(t, "item.output", fe.Param)
			require.Equal(t, tc.pending, b.pending, "a refused input takes nothing")
		})
	}
}

func TestAdmitTools(t *testing.T) {
	r := admitRule{meter: fakeMeter{1000}, reply: 100}
	require.Nil(t, admitTools(r, "session.tools", make([]duplex.Tool, 10)))
	for _, n := range []int{100, 1000} { // over the room by tokens, over the window by size
		fe := admitTools(r, "session.tools", make([]duplex.Tool, n))
		require.NotNil(t, fe, n)
		require.Equal(t, "context_length_exceeded", fe.Code)
		require.Equal(t, "session.tools", fe.Param)
	}
	require.Nil(t, admitTools(admitRule{}, "session.tools", make([]duplex.Tool, 1000)), "nothing measured")
}

// The pipeline's refusals reach the session through requestclient's figures.
func TestMeasureErrorCodes(t *testing.T) {
	fe := measureError(&stage.InputTooLongError{Bytes: 10, Limit: 5}, "item.output", 4)
	require.Equal(t, "string_above_max_length", fe.Code)
	require.Contains(t, fe.Message, "maximum length 5, but got a string with length 10")
	_, ok := requestclient.InputTooLongErrorOf(&stage.InputTooLongError{Bytes: 10, Limit: 5})
	require.True(t, ok)
	require.Equal(t, "context_length_exceeded", measureError(&stage.ContextLengthError{PromptTokens: 9, Limit: 8}, "p", 6).Code)
	require.Nil(t, measureError(stage.ErrTemplate, "p", 6), "a failure to count admits")
}
