package gpu

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// A llama_decode failure other than a full cache is ErrDecode: the sequences of that step fail
// with it (counted in KVStats.DecodeErrors, omniserve_engine_decode_errors_total), the others
// keep generating. The failure is a real one: the sequence's last cell is removed from the KV
// cache behind the scheduler's back, so llama.cpp refuses the next batch (its positions no
// longer follow the cache's), as it would any batch that disagrees with the cache.
func TestDecodeFailureIsErrDecode(t *testing.T) {
	r := loadTiny(t, nil)
	ctx := context.Background()
	other := openSeq(t, r, SeqOptions{})
	_, err := other.AppendText(ctx, "hello there")
	require.NoError(t, err)
	s := openSeq(t, r, SeqOptions{})
	_, err = s.AppendText(ctx, "tell me about the sea")
	require.NoError(t, err)
	// The append left its last token pending (decoded with the next call), so the scheduler is
	// idle: nothing else touches the context while the cell goes.
	decoded := int(s.histLen.Load()) - 1
	require.Positive(t, decoded)
	r.lctx.KvCacheSeqRm(s.slot, decoded-1, -1)

	_, err = s.Generate(ctx, GenerateOptions{MaxTokens: 4}, func(Piece) error { return nil })
	require.ErrorIs(t, err, ErrDecode)
	require.ErrorContains(t, err, "llama_decode failed with code")
	require.EqualValues(t, 1, r.KVStats().DecodeErrors)
	require.Zero(t, r.KVStats().FullEvents, "not a full cache")

	toks, _, _ := generate(t, other, GenerateOptions{MaxTokens: 4})
	require.Len(t, toks, 4, "the other sequence is unaffected")
}
