package stage

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
)

// planDrop decides from token counts alone: nothing under the limit; "disabled" refuses past
// it; "auto" and retention_ratio drop the fewest whole turns that reach the retention share of
// the budget, or as many as the newest turn allows, and refuse when that is still too long.
func TestPlanDrop(t *testing.T) {
	// A window of 1000 tokens, 100 for the reply, 100 of instructions: 800 for the conversation.
	budget := func(tr duplex.Truncation) tokenBudget {
		return tokenBudget{window: 1000, reply: 100, pinned: 100, trunc: tr}
	}
	auto := duplex.Truncation{Mode: duplex.TruncationAuto}
	ratio := func(r float64, post int) duplex.Truncation {
		return duplex.Truncation{Mode: duplex.TruncationRetentionRatio, RetentionRatio: r, PostInstructions: post}
	}
	// Ten turns of 90 tokens each: dropping turns[:i+1] leaves 900 - 90(i+1).
	turns := []int{1, 2, 3, 4, 5, 6, 7, 8, 9}
	even := func(i int) (int, error) { return 900 - 90*(i+1), nil }
	tests := []struct {
		name        string
		b           tokenBudget
		conv        int
		turns       []int
		after       func(int) (int, error)
		wantThrough int
		wantAfter   int
		wantErr     bool
	}{
		{name: "within the limit", b: budget(auto), conv: 800, turns: turns, after: even, wantAfter: 800},
		{name: "auto keeps three quarters", b: budget(auto), conv: 900, turns: turns, after: even, wantThrough: 4, wantAfter: 540},
		{name: "disabled refuses", b: budget(duplex.Truncation{Mode: duplex.TruncationDisabled}), conv: 801, turns: turns, after: even, wantAfter: 801, wantErr: true},
		{name: "disabled within the limit", b: budget(duplex.Truncation{Mode: duplex.TruncationDisabled}), conv: 800, turns: turns, after: even, wantAfter: 800},
		{name: "retention ratio of post_instructions", b: budget(ratio(0.5, 400)), conv: 450, turns: turns, after: even, wantThrough: 8, wantAfter: 180},
		{name: "post_instructions above the window acts as the window", b: budget(ratio(1, 5000)), conv: 810, turns: turns, after: even, wantThrough: 2, wantAfter: 720},
		{name: "ratio 0 drops all but the newest turn", b: budget(ratio(0, 0)), conv: 900, turns: turns, after: even, wantThrough: 9, wantAfter: 90},
		{name: "the newest turn alone is too long", b: budget(auto), conv: 1900, turns: []int{1}, after: func(int) (int, error) { return 1000, nil }, wantAfter: 1000, wantErr: true},
		{name: "nothing to drop", b: budget(auto), conv: 900, wantAfter: 900, wantErr: true},
		{name: "a count that fails", b: budget(auto), conv: 900, turns: turns, after: func(int) (int, error) { return 0, errors.New("no tokenizer") }, wantAfter: 900, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := planDrop(tt.b, tt.conv, tt.turns, tt.after)
			require.Equal(t, tt.wantThrough, got.through)
			require.Equal(t, tt.wantAfter, got.after)
			if !tt.wantErr {
				require.NoError(t, got.err)
				return
			}
			require.Error(t, got.err)
		})
	}
}

// The room kept for a reply is at most a quarter of the window.
func TestBudgetReplyRoom(t *testing.T) {
	require.Equal(t, 256, newBudget(2048, 256, 0, duplex.Truncation{}).reply)
	require.Equal(t, 512, newBudget(2048, 4096, 0, duplex.Truncation{}).reply)
	require.Equal(t, 1536, newBudget(2048, 4096, 0, duplex.Truncation{}).limit())
}

// A refusal names the context window: it is a *ContextLengthError, and says truncation is
// disabled when it is.
func TestBudgetOverflowNamesTheLimit(t *testing.T) {
	b := tokenBudget{window: 1000, reply: 100, pinned: 100, trunc: duplex.Truncation{Mode: duplex.TruncationDisabled}}
	err := b.overflow(850)
	require.ErrorIs(t, err, ErrContextLength)
	var cle *ContextLengthError
	require.ErrorAs(t, err, &cle)
	require.Equal(t, ContextLengthError{PromptTokens: 950, CompletionTokens: 100, Limit: 1000}, *cle)
	require.Contains(t, err.Error(), "truncation is disabled")
	require.Contains(t, err.Error(), "maximum context length is 1000 tokens")
}

// Whole turns go, oldest first; system messages (instructions, tools) and the newest turn stay.
func TestDropTurns(t *testing.T) {
	hist := []gpu.ChatMessage{
		{Role: "system", Content: "be brief"},
		{Role: "user", Content: "one", Turn: 1}, {Role: "assistant", Content: "1", Turn: 1},
		{Role: "system", Content: "tools", Turn: 2},
		{Role: "user", Content: "two", Turn: 2}, {Role: "assistant", Content: "2", Turn: 2},
		{Role: "user", Content: "three", Turn: 3},
	}
	require.Equal(t, []int{1, 2}, turnsOf(hist))
	require.Equal(t, []gpu.ChatMessage{
		{Role: "system", Content: "be brief"}, {Role: "system", Content: "tools", Turn: 2},
		{Role: "user", Content: "two", Turn: 2}, {Role: "assistant", Content: "2", Turn: 2},
		{Role: "user", Content: "three", Turn: 3},
	}, dropTurns(hist, 1))
	require.Len(t, dropTurns(hist, 2), 3)
	require.Nil(t, turnsOf(nil))
}
