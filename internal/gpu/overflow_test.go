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

func TestSharedCacheFull(t *testing.T) {
	// 4 sequences of up to 512 tokens share 512 cells: the cache fills before any sequence
	// reaches its own limit.
	r := loadTiny(t, func(c *Config) {
		c.ContextSize = 512
		c.SeqContext = 512
		c.MaxSequences = 4
		c.Overflow = OverflowError
	})
	ctx := context.Background()
	var seqs []*Sequence
	for range 3 {
		s := openSeq(t, r, SeqOptions{})
		_, err := s.AppendText(ctx, randomText(testRNG(), 150))
		require.NoError(t, err)
		seqs = append(seqs, s)
	}
	before := r.KVStats()
	require.Equal(t, KVStats{Cells: 512, CellsHeld: before.CellsHeld, SeqContext: 512, Sequences: 3, MaxSequences: 4,
		WorstCaseHeld: 3 * 512}, before)
	require.Greater(t, before.CellsHeld, 3*100, "the three sequences hold their prompts")
	s := openSeq(t, r, SeqOptions{})
	_, err := s.AppendText(ctx, randomText(testRNG(), 150))
	require.ErrorIs(t, err, ErrContextFull)
	require.Positive(t, r.KVStats().FullEvents, "a full cache is counted")
	seqs[0].Close()
	toks, _, _ := generate(t, seqs[1], GenerateOptions{MaxTokens: 5})
	require.Len(t, toks, 5)
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
