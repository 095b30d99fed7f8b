package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// genText runs prompt then one Generate with s on a fresh sequence and returns its tokens, text
// and pieces.
func genText(t *testing.T, r *Runner, s Sampling, maxTokens int) ([]int, string, []Piece, GenerateResult) {
	t.Helper()
	seq, err := r.Open(context.Background(), SeqOptions{})
	require.NoError(t, err)
	defer seq.Close() // many per test: free the slot at once
	_, err = seq.AppendText(context.Background(), "user: tell me a story about the sea\nassistant:")
	require.NoError(t, err)
	var toks []int
	var text strings.Builder
	var pieces []Piece
	res, err := seq.Generate(context.Background(), GenerateOptions{MaxTokens: maxTokens, Sampling: &s}, func(p Piece) error {
		if p.Token >= 0 {
			toks = append(toks, p.Token)
		}
		text.WriteString(p.Text)
		pieces = append(pieces, p)
		return nil
	})
	require.NoError(t, err)
	return toks, text.String(), pieces, res
}

func TestSamplingRandomSeed(t *testing.T) {
	t.Parallel()
	r := loadTiny(t, nil)
	s := Sampling{Temperature: 1, TopP: 1, RandomSeed: true}
	seen := map[string]bool{}
	for range 4 {
		_, text, _, _ := genText(t, r, s, 12)
		seen[text] = true
	}
	require.Greater(t, len(seen), 1, "without a seed, temperature 1 must not repeat the same text: %v", seen)
	s = Sampling{Temperature: 1, TopP: 0.9, Seed: 42}
	a, _, _, _ := genText(t, r, s, 12)
	b, _, _, _ := genText(t, r, s, 12)
	require.Equal(t, a, b, "the same seed gives the same tokens")
}

func TestSamplingLogitBiasAndPenalties(t *testing.T) {
	t.Parallel()
	r := loadTiny(t, nil)
	ws, err := r.Tokenize(" ocean")
	require.NoError(t, err)
	word := ws[len(ws)-1:] // SentencePiece may put a lone "▁" first
	// +100 on one word makes it (practically) certain at temperature 1.
	toks, _, _, _ := genText(t, r, Sampling{Temperature: 1, Seed: 1, LogitBias: map[int]float32{word[0]: 100}}, 8)
	require.Equal(t, []int{word[0], word[0], word[0], word[0], word[0], word[0], word[0], word[0]}, toks)
	// A presence penalty of 2 cannot beat +100, but -100 bans the token outright.
	toks, _, _, _ = genText(t, r, Sampling{Temperature: 0, LogitBias: map[int]float32{word[0]: 100}, PresencePenalty: 2}, 4)
	require.Equal(t, word[0], toks[0])
	greedy, _, _, _ := genText(t, r, Sampling{Temperature: 0}, 16)
	banned, _, _, _ := genText(t, r, Sampling{Temperature: 0, LogitBias: map[int]float32{greedy[0]: -100}}, 16)
	require.NotContains(t, banned, greedy[0])
	// The random model repeats words at temperature 0.7 ("table table table"); OpenAI's
	// penalties (llama.cpp's chain, window as long as the completion) spread them.
	distinct := func(ts []int) int {
		m := map[int]bool{}
		for _, x := range ts {
			m[x] = true
		}
		return len(m)
	}
	// Both samplers: llama.cpp's chain, and the Go one (which any logit_bias selects; banning
	// <unk> changes nothing else).
	for _, bias := range []map[int]float32{nil, {0: -100}} {
		plain, pen, neg := 0, 0, 0
		for seed := range uint32(4) {
			a, _, _, _ := genText(t, r, Sampling{Temperature: 0.7, Seed: seed, LogitBias: bias}, 24)
			b, _, _, _ := genText(t, r, Sampling{Temperature: 0.7, Seed: seed, LogitBias: bias, PresencePenalty: 2, FrequencyPenalty: 2}, 24)
			c, _, _, _ := genText(t, r, Sampling{Temperature: 0.7, Seed: seed, LogitBias: bias, PresencePenalty: -2, FrequencyPenalty: -2}, 24)
			plain, pen, neg = plain+distinct(a), pen+distinct(b), neg+distinct(c)
		}
		t.Logf("go sampler %v: distinct tokens in 4 x 24: plain %d, penalized %d, negative penalties %d", bias != nil, plain, pen, neg)
		require.Greater(t, pen, plain)
		require.Less(t, neg, plain)
	}
}

func TestSamplingCheck(t *testing.T) {
	t.Parallel()
	r := loadTiny(t, nil)
	for _, tc := range []struct {
		s     Sampling
		param string
	}{
		{Sampling{PresencePenalty: 2.5}, "presence_penalty"},
		{Sampling{FrequencyPenalty: -2.01}, "frequency_penalty"},
		{Sampling{FrequencyPenalty: float32(math.NaN())}, "frequency_penalty"},
		{Sampling{LogitBias: map[int]float32{5: 101}}, "logit_bias"},
		{Sampling{LogitBias: map[int]float32{r.vocab: 1}}, "logit_bias"},
		{Sampling{LogitBias: map[int]float32{-1: 1}}, "logit_bias"},
		{Sampling{TopLogprobs: 21}, "top_logprobs"},
		{Sampling{Grammar: "root ::= ("}, "response_format"},
	} {
		err := r.CheckSampling(&tc.s)
		var se *SamplingError
		require.True(t, errors.As(err, &se), "%+v: %v", tc.s, err)
		require.Equal(t, tc.param, se.Param)
	}
	require.NoError(t, r.CheckSampling(&Sampling{PresencePenalty: 2, FrequencyPenalty: -2, LogitBias: map[int]float32{0: -100}, TopLogprobs: 20}))
	// Generate refuses a bad sampling instead of ignoring it.
	seq := openSeq(t, r, SeqOptions{})
	_, err := seq.AppendText(context.Background(), "hello")
	require.NoError(t, err)
	_, err = seq.Generate(context.Background(), GenerateOptions{MaxTokens: 2, Sampling: &Sampling{PresencePenalty: 3}}, func(Piece) error { return nil })
	var se *SamplingError
	require.ErrorAs(t, err, &se)
}

func TestSamplingLogprobs(t *testing.T) {
	t.Parallel()
	r := loadTiny(t, nil)
	toks, _, pieces, _ := genText(t, r, Sampling{Temperature: 0, Logprobs: true, TopLogprobs: 5}, 6)
	require.Len(t, toks, 6)
	for _, p := range pieces {
		if p.Token < 0 {
			continue
		}
		require.NotNil(t, p.Logprob)
		lp := p.Logprob
		require.Equal(t, p.Token, lp.Token)
		require.LessOrEqual(t, lp.Logprob, float32(0))
		require.Len(t, lp.Top, 5)
		// Greedy: the chosen token is the most likely one, and the list is sorted.
		require.Equal(t, p.Token, lp.Top[0].Token)
		require.InDelta(t, lp.Logprob, lp.Top[0].Logprob, 1e-6)
		for i := 1; i < len(lp.Top); i++ {
			require.LessOrEqual(t, lp.Top[i].Logprob, lp.Top[i-1].Logprob)
		}
	}
}

func TestSamplingGrammarJSON(t *testing.T) {
	t.Parallel()
	r := loadTiny(t, nil)
	// A schema whose values are bounded: the random model must finish the object (EOS is the
	// only token the grammar allows afterwards).
	schema := `{"type":"object","properties":{"answer":{"type":"string","enum":["yes","no"]},"n":{"type":"integer"},"ok":{"type":"boolean"}},"required":["answer","n","ok"],"additionalProperties":false}`
	g, err := SchemaGrammar([]byte(schema))
	require.NoError(t, err)
	for seed := range uint32(5) {
		_, text, _, res := genText(t, r, Sampling{Temperature: 1, Seed: seed, Grammar: g}, 128)
		require.Equal(t, "stop", res.FinishReason, text)
		var v struct {
			Answer string `json:"answer"`
			N      *int   `json:"n"`
			OK     *bool  `json:"ok"`
		}
		require.NoError(t, json.Unmarshal([]byte(text), &v), "seed %d: %q", seed, text)
		require.Contains(t, []string{"yes", "no"}, v.Answer)
		require.NotNil(t, v.N)
		require.NotNil(t, v.OK)
	}
	// json_object with the generic grammar: the random model's strings never end by themselves
	// (words outweigh the quote byte), so a bias on '"' lets them close; it must parse.
	qs, err := r.Tokenize(`"`)
	require.NoError(t, err)
	quote := qs[len(qs)-1:]
	require.Equal(t, `"`, r.Detokenize(quote))
	_, text, _, res := genText(t, r, Sampling{Temperature: 1, Seed: 3, Grammar: JSONGrammar, LogitBias: map[int]float32{quote[0]: 30}}, 400)
	require.Equal(t, "stop", res.FinishReason, text)
	var obj map[string]any
	require.NoError(t, json.Unmarshal([]byte(text), &obj), text)

	_, err = SchemaGrammar([]byte(`{"type":`))
	require.Error(t, err)
}

// BenchmarkSamplerVocab151k measures one sampling step on a Qwen-sized vocabulary (no model:
// bias, penalties, temperature and top-p on random logits), the per-token cost Go sampling adds.
func BenchmarkSamplerVocab151k(b *testing.B) {
	rng := testRNG()
	base := make([]float32, 151936)
	for i := range base {
		base[i] = float32(rng.NormFloat64() * 4)
	}
	for _, tc := range []struct {
		name string
		s    Sampling
	}{
		{"greedy", Sampling{}},
		{"temp1", Sampling{Temperature: 1, TopP: 1}},
		{"temp1_topp0.9_penalties_bias", Sampling{Temperature: 1, TopP: 0.9, PresencePenalty: 0.5, FrequencyPenalty: 0.5, LogitBias: map[int]float32{7: 5}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			sm := &sampler{s: tc.s, rng: testRNG(), counts: map[int32]int{}}
			logits := make([]float32, len(base))
			for b.Loop() {
				copy(logits, base)
				tok, _, err := sm.sample(logits)
				if err != nil {
					b.Fatal(err)
				}
				sm.counts[int32(tok)]++
			}
		})
	}
}
