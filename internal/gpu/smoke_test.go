package gpu

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTokenizeRoundTrip(t *testing.T) {
	r := loadTiny(t, nil)
	info := r.Info()
	require.Equal(t, "llama", info.Arch)
	require.Equal(t, "plain", info.ChatFormat)
	require.Contains(t, info.Backends, "CPU")
	for _, text := range []string{"hello the cat likes warm milk", "go forward ten meters", "Hello, Wörld! @#"} {
		toks, err := r.Tokenize(text)
		require.NoError(t, err)
		require.NotEmpty(t, toks)
		require.Equal(t, text, strings.TrimPrefix(r.Detokenize(toks), " "))
	}
	toks, err := r.Tokenize("hello the cat")
	require.NoError(t, err)
	require.Len(t, toks, 3, "each vocabulary word is one token")
}

func TestGenerateSmoke(t *testing.T) {
	r := loadTiny(t, nil)
	s, err := r.Open(context.Background(), SeqOptions{Sampling: Sampling{Temperature: 0.8, TopK: 40, Seed: 7}})
	require.NoError(t, err)
	defer s.Close()
	st, err := s.AppendText(context.Background(), "user: hello there\nassistant:")
	require.NoError(t, err)
	require.Greater(t, st.Tokens, 3)
	toks, text, res := generate(t, s, GenerateOptions{MaxTokens: 20})
	require.Len(t, toks, 20)
	require.Equal(t, "length", res.FinishReason)
	require.Len(t, strings.Fields(text), 20, "every token is a word: %q", text)
	require.Equal(t, 20, res.Stats.TokensOut)
	require.Len(t, res.Stats.ITLsMs, 19)
	t.Logf("text=%q stats=%+v", text, res.Stats)
}
