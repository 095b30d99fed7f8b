package gpu

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUserTurnEnd: the dummy models' plain format closes a user message with a newline, and
// its token is what NextTokenProb is asked about.
func TestUserTurnEnd(t *testing.T) {
	r := loadTiny(t, nil)
	e, err := r.UserTurnEnd()
	require.NoError(t, err)
	require.Equal(t, "\n", e.Markup)
	toks, err := r.Tokenize("\n")
	require.NoError(t, err)
	require.Equal(t, toks[0], e.Token)
}

// TestNextTokenProbLeavesSequence: a score is a probability, the same for the same input,
// different for different words, and leaves the sequence as it was: a generation after any
// number of scores (with the history's last token still pending, and with none pending) gives
// the tokens a generation without them gives.
func TestNextTokenProbLeavesSequence(t *testing.T) {
	r := loadTiny(t, nil)
	e, err := r.UserTurnEnd()
	require.NoError(t, err)
	ctx := context.Background()
	const history = "system: be brief\nuser: tell me about the sea\nassistant: the sea is wide\n"
	sampling := Sampling{Temperature: 1, TopK: 40, Seed: 3}

	plain := openSeq(t, r, SeqOptions{Sampling: sampling})
	_, err = plain.AppendText(ctx, history)
	require.NoError(t, err)
	_, err = plain.AppendText(ctx, "user: and the river\nassistant:")
	require.NoError(t, err)
	want, _, _ := generate(t, plain, GenerateOptions{MaxTokens: 16})

	s := openSeq(t, r, SeqOptions{Sampling: sampling})
	_, err = s.AppendText(ctx, history)
	require.NoError(t, err)
	histLen := s.HistoryLen()
	probs := map[string]float64{}
	for _, partial := range []string{"user: and the", "user: and the river", "user: and the"} {
		p, err := s.NextTokenProb(ctx, partial, e.Token)
		require.NoError(t, err)
		require.GreaterOrEqual(t, p, 0.0)
		require.LessOrEqual(t, p, 1.0)
		if prev, ok := probs[partial]; ok {
			require.Equal(t, prev, p, "the same input scores the same")
		}
		probs[partial] = p
		require.Equal(t, histLen, s.HistoryLen(), "a score adds nothing to the history")
	}
	require.NotEqual(t, probs["user: and the"], probs["user: and the river"], "other words, another probability")
	_, err = s.AppendText(ctx, "user: and the river\nassistant:")
	require.NoError(t, err)
	// A score with the appended text's last token pending (decoded with the next call).
	_, err = s.NextTokenProb(ctx, " more words", e.Token)
	require.NoError(t, err)
	got, _, _ := generate(t, s, GenerateOptions{MaxTokens: 16})
	require.Equal(t, want, got, "generation after scores equals generation without")

	// After a generation nothing is pending; the history's logits are recomputed as before.
	after, err := s.NextTokenProb(ctx, "\nuser: thanks", e.Token)
	require.NoError(t, err)
	require.GreaterOrEqual(t, after, 0.0)
	_, err = s.AppendText(ctx, "\nuser: thanks\nassistant:")
	require.NoError(t, err)
	got2, _, _ := generate(t, s, GenerateOptions{MaxTokens: 8})
	_, err = plain.AppendText(ctx, "\nuser: thanks\nassistant:")
	require.NoError(t, err)
	want2, _, _ := generate(t, plain, GenerateOptions{MaxTokens: 8})
	require.Equal(t, want2, got2, "the second generation agrees too")
}

// TestNextTokenProbErrors: bad tokens, an overlong text and a closed sequence are errors.
func TestNextTokenProbErrors(t *testing.T) {
	r := loadTiny(t, nil)
	ctx := context.Background()
	s := openSeq(t, r, SeqOptions{MaxContext: 64})
	_, err := s.NextTokenProb(ctx, "hello", -1)
	require.ErrorIs(t, err, ErrInvalidToken)
	require.ErrorContains(t, err, "outside vocabulary")
	_, err = s.Append(ctx, []int{r.vocab})
	require.ErrorIs(t, err, ErrInvalidToken, "an append names the same condition")
	_, err = s.NextTokenProb(ctx, strings.Repeat("the sea ", 100), 5)
	require.ErrorIs(t, err, ErrContextFull)
	s.Close()
	_, err = s.NextTokenProb(ctx, "hello", 5)
	require.ErrorIs(t, err, ErrClosed)
}
