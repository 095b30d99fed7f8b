package gpu

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOverflowTruncate(t *testing.T) {
	r := loadTiny(t, func(c *Config) { c.SeqContext = 128 })
	ctx := context.Background()
	other := openSeq(t, r, SeqOptions{})
	_, err := other.AppendText(ctx, "user: hello\nassistant:")
	require.NoError(t, err)
	sys, err := r.Tokenize("system: you are a robot that can speak")
	require.NoError(t, err)
	s := openSeq(t, r, SeqOptions{KeepPrefix: len(sys) + 1, Sampling: Sampling{Temperature: 1, TopK: 40}})
	_, err = s.Append(ctx, sys)
	require.NoError(t, err)
	for range 5 {
		_, err := s.AppendText(ctx, randomText(testRNG(), 60))
		require.NoError(t, err)
		toks, _, res := generate(t, s, GenerateOptions{MaxTokens: 40})
		require.Len(t, toks, 40)
		require.Equal(t, "length", res.FinishReason)
		require.LessOrEqual(t, s.HistoryLen(), 128+1)
	}
	// The kept prefix (BOS + system prompt) survived every truncation. The scheduler wrote
	// history before it finished the last Generate, so this read is ordered after it.
	require.Equal(t, append([]int{r.bos}, sys...), s.history[:len(sys)+1])
	s.Close()
	toks, _, _ := generate(t, other, GenerateOptions{MaxTokens: 5})
	require.Len(t, toks, 5, "the other sequence is unaffected")
}

func TestOverflowTruncateReprefill(t *testing.T) {
	r := loadTiny(t, func(c *Config) { c.SeqContext = 96 })
	r.canShift = false // exercise the re-prefill path a cache without shift takes
	ctx := context.Background()
	s := openSeq(t, r, SeqOptions{KeepPrefix: 4})
	for range 4 {
		_, err := s.AppendText(ctx, randomText(testRNG(), 50))
		require.NoError(t, err)
		toks, _, _ := generate(t, s, GenerateOptions{MaxTokens: 30})
		require.Len(t, toks, 30)
		require.LessOrEqual(t, s.HistoryLen(), 96+1)
	}
}

func TestOverflowError(t *testing.T) {
	r := loadTiny(t, func(c *Config) { c.SeqContext = 64; c.Overflow = OverflowError })
	ctx := context.Background()
	other := openSeq(t, r, SeqOptions{})
	_, err := other.AppendText(ctx, "hello")
	require.NoError(t, err)
	s := openSeq(t, r, SeqOptions{})
	_, err = s.AppendText(ctx, randomText(testRNG(), 40))
	require.NoError(t, err)
	_, err = s.AppendText(ctx, randomText(testRNG(), 40))
	require.ErrorIs(t, err, ErrContextFull, "this append alone fails")
	res, err := s.Generate(ctx, GenerateOptions{MaxTokens: 100}, func(Piece) error { return nil })
	require.ErrorIs(t, err, ErrContextFull)
	require.Equal(t, "length", res.FinishReason)
	require.Equal(t, 64, s.HistoryLen())
	toks, _, _ := generate(t, other, GenerateOptions{MaxTokens: 5})
	require.Len(t, toks, 5, "the other sequence is unaffected")
}

func TestOpenReservesWindow(t *testing.T) {
	// 512 cells hold two 256-token windows: a third sequence is refused when it opens, not
	// when the cache fills under the first two, and the two fill their windows untouched.
	r := loadTiny(t, func(c *Config) {
		c.ContextSize = 512
		c.SeqContext = 256
		c.MaxSequences = 4
	})
	ctx := context.Background()
	a := openSeq(t, r, SeqOptions{})
	b := openSeq(t, r, SeqOptions{})
	_, err := r.Open(ctx, SeqOptions{})
	require.ErrorIs(t, err, ErrKVReserved)
	require.ErrorIs(t, err, ErrNoFreeSlot, "callers that map no slot to 503 need no new case")
	require.ErrorContains(t, err, "512 of 512 cells are reserved by 2 sequences, this one needs 256")
	small, err := r.Open(ctx, SeqOptions{MaxContext: 64})
	require.ErrorIs(t, err, ErrKVReserved, "a smaller window does not fit either")
	require.Nil(t, small)

	for _, s := range []*Sequence{a, b} {
		_, err := s.AppendText(ctx, randomText(testRNG(), 200))
		require.NoError(t, err)
		toks, _, _ := generate(t, s, GenerateOptions{MaxTokens: 400})
		require.Len(t, toks, 400, "each sequence runs past its window, dropping its own oldest tokens")
		require.LessOrEqual(t, s.HistoryLen(), 256)
	}
	st := r.KVStats()
	require.Zero(t, st.FullEvents, "the cache was never found full")
	require.Equal(t, int64(2), st.RefusedKV)
	require.Equal(t, 512, st.WorstCaseHeld)
	require.LessOrEqual(t, st.CellsHeld, 512)

	a.Close()
	c := openSeq(t, r, SeqOptions{})
	toks, _, _ := generate(t, c, GenerateOptions{MaxTokens: 5})
	require.Len(t, toks, 5, "a closed sequence's window is free again")
}

func TestUnboundedGenerateEndsAtWindow(t *testing.T) {
	r := loadTiny(t, func(c *Config) { c.SeqContext = 64 })
	s := openSeq(t, r, SeqOptions{})
	_, err := s.AppendText(context.Background(), "hello there")
	require.NoError(t, err)
	toks, _, res := generate(t, s, GenerateOptions{})
	require.Equal(t, "length", res.FinishReason)
	require.Equal(t, 64, s.HistoryLen())
	require.Len(t, toks, 64-3)
}
