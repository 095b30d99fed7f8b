package stage

import (
	"github.com/omniserve/omniserve/internal/duplex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/gpu"
)

func TestDuplexHistoryBudget(t *testing.T) {
	msg := func(role string, n int) gpu.ChatMessage {
		return gpu.ChatMessage{Role: role, Content: strings.Repeat("x", n)}
	}
	cases := []struct {
		name  string
		limit int
		hist  []gpu.ChatMessage
		decl  string // the stream's tools declaration
		want  []int  // lengths kept
	}{
		{"under the budget", 100, []gpu.ChatMessage{msg("system", 10), msg("user", 40), msg("assistant", 40)}, "", []int{10, 40, 40}},
		{"oldest dropped, instructions kept", 100, []gpu.ChatMessage{msg("system", 10), msg("user", 40), msg("assistant", 40), msg("user", 40)}, "", []int{10, 40, 40}},
		{"several dropped", 60, []gpu.ChatMessage{msg("user", 30), msg("assistant", 30), msg("user", 30), msg("assistant", 30)}, "", []int{30, 30}},
		{"the newest is always kept", 10, []gpu.ChatMessage{msg("system", 5), msg("user", 50), msg("user", 50)}, "", []int{5, 50}},
		{"unbounded", 0, []gpu.ChatMessage{msg("user", 500), msg("user", 500)}, "", []int{500, 500}},
		{"the tools declaration kept", 100, []gpu.ChatMessage{msg("system", 10), msg("user", 40), {Role: "system", Content: strings.Repeat("t", 20)}, msg("assistant", 40), msg("user", 40)},
			strings.Repeat("t", 20), []int{10, 20, 40}},
		{"another system message is not", 50, []gpu.ChatMessage{msg("user", 20), {Role: "system", Content: strings.Repeat("t", 20)}, msg("user", 40)},
			strings.Repeat("u", 20), []int{40}},
	}
	for _, tc := range cases {
		c := &conversation{opts: DuplexOptions{Options: duplex.Options{MaxHistoryBytes: tc.limit}}, history: tc.hist, decl: toolsDecl{have: tc.decl}}
		c.trimHistory()
		var got []int
		for _, m := range c.history {
			got = append(got, len(m.Content))
		}
		require.Equal(t, tc.want, got, tc.name)
		if len(tc.hist) > 0 && tc.hist[0].Role == "system" {
			require.Equal(t, "system", c.history[0].Role, tc.name)
		}
	}
}
