package gpu

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDummyReplyLen(t *testing.T) {
	prompt := []int{1, 400, 500, 600}
	n := dummyReplyLen(dummyReplyMin, dummyReplyMax, 7, prompt[:2], prompt[2:])
	require.Equal(t, n, dummyReplyLen(dummyReplyMin, dummyReplyMax, 7, prompt[:1], prompt[1:]), "the prompt's tokens count, not how they are split")
	long := make([]int, 1000)
	for i := range long {
		long[i] = 300 + i%200
	}
	old := append([]int{99}, long[1:]...)
	require.Equal(t, dummyReplyLen(dummyReplyMin, dummyReplyMax, 7, long, nil), dummyReplyLen(dummyReplyMin, dummyReplyMax, 7, old, nil), "only the last tokens count")

	// Over many prompts and seeds: every length in the range, short ones the most common.
	counts := map[int]int{}
	sum := 0
	const draws = 4000
	for i := range draws {
		n := dummyReplyLen(dummyReplyMin, dummyReplyMax, uint32(i%4), []int{1, 300 + i%211, 301 + i/211}, []int{42})
		require.GreaterOrEqual(t, n, dummyReplyMin)
		require.LessOrEqual(t, n, dummyReplyMax)
		counts[n]++
		sum += n
	}
	require.Len(t, counts, dummyReplyMax-dummyReplyMin+1, "every length is drawn")
	require.Greater(t, counts[dummyReplyMin], counts[dummyReplyMax], "short replies are commoner")
	mean := float64(sum) / draws
	require.InDelta(t, 16.3, mean, 1, "mean of 8 + 25·min(u1, u2)")
	require.Equal(t, 500, dummyReplyLen(500, 500, 7, prompt, nil), "a fixed length")
}

// TestDummyReplyEnds: a dummy reply ends by itself with EOS ("stop") at the length drawn from
// its prompt, the same for the same conversation, unless MaxTokens comes first or IgnoreEOS.
func TestDummyReplyEnds(t *testing.T) {
	r := loadTiny(t, nil)
	r.dummyEnd = true // loadTiny switched it off
	const prompt = "user: hello there\nassistant:"
	reply := func(sampling Sampling, opts GenerateOptions) ([]int, GenerateResult) {
		s, err := r.Open(context.Background(), SeqOptions{Sampling: sampling})
		require.NoError(t, err)
		defer s.Close()
		_, err = s.AppendText(context.Background(), prompt)
		require.NoError(t, err)
		toks, _, res := generate(t, s, opts)
		return toks, res
	}
	seeded := Sampling{Temperature: 0.8, TopK: 40, Seed: 7}
	toks, res := reply(seeded, GenerateOptions{MaxTokens: 256})
	require.Equal(t, "stop", res.FinishReason)
	require.Equal(t, dummyEOS, toks[len(toks)-1], "the reply ends with the model's EOS")
	words := len(toks) - 1
	require.GreaterOrEqual(t, words, dummyReplyMin)
	require.LessOrEqual(t, words, dummyReplyMax)
	t.Logf("reply of %d words", words)

	for _, tc := range []struct {
		name     string
		sampling Sampling
		opts     GenerateOptions
		reason   string
		n        int
	}{
		{"same conversation, same length", seeded, GenerateOptions{MaxTokens: 256}, "stop", words + 1},
		{"fresh random words, same length", Sampling{Temperature: 0.8, TopK: 40, Seed: 7, RandomSeed: true}, GenerateOptions{MaxTokens: 256}, "stop", words + 1},
		{"greedy, same length", Sampling{Seed: 7}, GenerateOptions{MaxTokens: 256}, "stop", words + 1},
		{"max tokens first", seeded, GenerateOptions{MaxTokens: words - 1}, "length", words - 1},
		{"max tokens at the end", seeded, GenerateOptions{MaxTokens: words}, "length", words},
		{"ignore eos", seeded, GenerateOptions{MaxTokens: 40, IgnoreEOS: true}, "length", 40},
		{"eos banned", Sampling{Temperature: 0.8, TopK: 40, Seed: 7, LogitBias: map[int]float32{dummyEOS: -100}}, GenerateOptions{MaxTokens: 40}, "length", 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			toks, res := reply(tc.sampling, tc.opts)
			require.Equal(t, tc.reason, res.FinishReason)
			require.Len(t, toks, tc.n)
			require.Equal(t, tc.reason == "stop", r.model.TokenIsEog(toks[len(toks)-1]))
		})
	}
}

// TestDummyEndAt: which generations get a drawn end. A grammar-constrained reply is left to its
// grammar (a cut would break its output), IgnoreEOS skips it, a real model never has one.
func TestDummyEndAt(t *testing.T) {
	s := &Sequence{history: []int{1, 400, 500}, pending: []int{600}}
	for _, tc := range []struct {
		name     string
		dummy    bool
		sampling Sampling
		opts     GenerateOptions
		want     int
	}{
		{"dummy", true, Sampling{Seed: 3}, GenerateOptions{}, dummyReplyLen(dummyReplyMin, dummyReplyMax, 3, s.history, s.pending)},
		{"grammar", true, Sampling{Seed: 3, Grammar: `root ::= "a"`}, GenerateOptions{}, 0},
		{"ignore eos", true, Sampling{Seed: 3}, GenerateOptions{IgnoreEOS: true}, 0},
		{"real model", false, Sampling{Seed: 3}, GenerateOptions{}, 0},
		{"eos banned", true, Sampling{Seed: 3, LogitBias: map[int]float32{dummyEOS: -100}}, GenerateOptions{}, 0},
		{"eos lowered", true, Sampling{Seed: 3, LogitBias: map[int]float32{dummyEOS: -50}}, GenerateOptions{}, dummyReplyLen(dummyReplyMin, dummyReplyMax, 3, s.history, s.pending)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Runner{dummyEnd: tc.dummy, cfg: Config{DummyReplyMin: dummyReplyMin, DummyReplyMax: dummyReplyMax}}
			require.Equal(t, tc.want, r.dummyEndAt(s, &genJob{sampling: tc.sampling, opts: tc.opts}))
		})
	}
}

func TestDummyReplyConfig(t *testing.T) {
	for _, tc := range []struct {
		name           string
		min, max       int
		wantLo, wantHi int
		bad            bool
	}{
		{"defaults", 0, 0, dummyReplyMin, dummyReplyMax, false},
		{"only max, long", 0, 2000, dummyReplyMin, 2000, false},
		{"only max, short", 0, 5, 5, 5, false},
		{"only min", 40, 0, 40, 40, false},
		{"both", 60, 60, 60, 60, false},
		{"reversed", 10, 5, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Config{DummyReplyMin: tc.min, DummyReplyMax: tc.max}.withDefaults()
			if tc.bad {
				require.ErrorIs(t, err, ErrInvalidConfig)
				return
			}
			require.NoError(t, err)
			require.Equal(t, [2]int{tc.wantLo, tc.wantHi}, [2]int{c.DummyReplyMin, c.DummyReplyMax})
		})
	}
}
