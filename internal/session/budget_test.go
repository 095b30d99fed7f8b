package session

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestInboxByteBudget: commands wait (never drop) while the inbox holds its byte budget; one
// larger than the budget passes alone; a waiter gives up with its ctx.
func TestInboxByteBudget(t *testing.T) {
	b := newByteBudget(1000)
	ctx := context.Background()
	require.NoError(t, b.acquire(ctx, 600))
	require.NoError(t, b.acquire(ctx, 400), "exactly the budget fits")

	got := make(chan error, 1)
	go func() { got <- b.acquire(ctx, 300) }()
	select {
	case err := <-got:
		t.Fatalf("acquired past the budget: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	b.release(600)
	require.NoError(t, <-got, "released bytes let the waiter in")
	require.Equal(t, 700, b.inUse())

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, b.acquire(short, 400), context.DeadlineExceeded, "a waiter gives up with its ctx")
	require.Equal(t, 700, b.inUse(), "a refused acquire holds nothing")

	b.release(700)
	require.NoError(t, b.acquire(ctx, 5000), "a command larger than the budget passes when nothing waits")
	b.release(5000)
	require.Zero(t, b.inUse())
}

func TestCommandBytes(t *testing.T) {
	instr := "be brief"
	cases := []struct {
		name string
		c    Command
		want int
	}{
		{"append", &AppendAudio{Data: make([]byte, 4800)}, commandOverhead + 4800},
		{"item", &CreateItem{Text: "hello", Audio: make([]byte, 10)}, commandOverhead + 15},
		{"update", &UpdateSession{Patch: ConfigPatch{Instructions: &instr}}, commandOverhead + len(instr)},
		{"response", &CreateResponse{Instructions: &instr, Input: []InputItem{{Role: "user", Text: "hi"}, {Ref: "item_1"}}}, commandOverhead + len(instr) + 2 + 6},
		{"heartbeat", &Heartbeat{}, commandOverhead},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, commandBytes(tc.c), tc.name)
	}
}
