package gpu

import (
	"context"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// TestReplyStartsAtVisibleText: over many seeds of the random-weight model, whose first token
// is often word-initial (" even"), no reply's text starts with whitespace; the history keeps
// the tokens as sampled.
func TestReplyStartsAtVisibleText(t *testing.T) {
	r := loadTiny(t, nil)
	ctx := context.Background()
	spaced := 0
	for seed := range uint32(40) {
		s := openSeq(t, r, SeqOptions{Sampling: Sampling{Temperature: 1, TopK: 50, Seed: seed}})
		_, err := s.AppendText(ctx, "user: say something\nassistant:")
		require.NoError(t, err)
		var raw, text strings.Builder
		_, err = s.Generate(ctx, GenerateOptions{MaxTokens: 8}, func(p Piece) error {
			if p.Token >= 0 && !r.model.TokenIsEog(p.Token) {
				raw.WriteString(r.model.TokenToPiece(p.Token))
			}
			text.WriteString(p.Text)
			return nil
		})
		require.NoError(t, err)
		if out := text.String(); out != "" {
			require.False(t, unicode.IsSpace(rune(out[0])), "seed %d: %q", seed, out)
			require.Equal(t, strings.TrimLeft(validText(raw.String()), " \t\n\r"), out, "seed %d: only the leading whitespace goes", seed)
		}
		if strings.HasPrefix(raw.String(), " ") {
			spaced++
		}
		s.Close()
	}
	require.Positive(t, spaced, "some replies began with a word-initial token: the test exercised the trim")
}
