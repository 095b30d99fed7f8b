package gpu

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// Forget drops a span of the history: the sequence then holds the prefix and what followed the
// span, Marks from before are lost, and generation goes on. Without a KV shift the tail is
// prefilled again at its new positions, so a greedy reply is exactly that of a sequence that
// never held the span; with one, the shifted cache serves the same history.
func TestForget(t *testing.T) {
	for _, shift := range []bool{true, false} {
		name := map[bool]string{true: "kv shift", false: "re-prefill"}[shift]
		t.Run(name, func(t *testing.T) {
			r := loadTiny(t, nil)
			if !shift {
				r.canShift = false
			}
			ctx := context.Background()
			prefix, err := r.Tokenize("system: you are a robot")
			require.NoError(t, err)
			span, err := r.Tokenize(" user: go forward ten meters assistant: ok")
			require.NoError(t, err)
			tail, err := r.Tokenize(" user: and then turn left assistant:")
			require.NoError(t, err)
			s := openSeq(t, r, SeqOptions{})
			_, err = s.Append(ctx, prefix)
			require.NoError(t, err)
			_, err = s.Append(ctx, span)
			require.NoError(t, err)
			_, err = s.Append(ctx, tail)
			require.NoError(t, err)
			mark := s.Mark()
			from := 1 + len(prefix) // BOS + prefix
			require.NoError(t, s.Forget(ctx, from, from+len(span)))
			require.Equal(t, from+len(tail), s.HistoryLen())
			require.ErrorIs(t, s.Rollback(ctx, mark), ErrMarkLost, "a mark from before the forget is lost")
			got, _, _ := generate(t, s, GenerateOptions{MaxTokens: 8})
			require.Len(t, got, 8)
			if shift {
				return
			}
			ref := openSeq(t, r, SeqOptions{})
			_, err = ref.Append(ctx, append(append([]int(nil), prefix...), tail...))
			require.NoError(t, err)
			want, _, _ := generate(t, ref, GenerateOptions{MaxTokens: 8})
			require.Equal(t, want, got, "the sequence reads as if the span had never been there")
		})
	}
}

// Forget of everything, the token not decoded yet included, empties the sequence; spans past its
// end or backwards are refused.
func TestForgetSpans(t *testing.T) {
	r := loadTiny(t, nil)
	ctx := context.Background()
	s := openSeq(t, r, SeqOptions{})
	_, err := s.AppendText(ctx, "system: you are a robot")
	require.NoError(t, err)
	n := s.HistoryLen()
	require.ErrorIs(t, s.Forget(ctx, 0, n+1), ErrMarkLost)
	require.ErrorIs(t, s.Forget(ctx, 3, 2), ErrMarkLost)
	require.NoError(t, s.Forget(ctx, 2, 2), "an empty span changes nothing")
	require.Equal(t, n, s.HistoryLen())
	require.NoError(t, s.Forget(ctx, 0, n))
	require.Zero(t, s.HistoryLen())
	_, err = s.AppendText(ctx, "user: hello assistant:")
	require.NoError(t, err)
	got, _, _ := generate(t, s, GenerateOptions{MaxTokens: 4})
	require.Len(t, got, 4)
}
