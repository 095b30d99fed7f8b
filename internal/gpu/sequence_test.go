package gpu

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func openSeq(t *testing.T, r *Runner, opts SeqOptions) *Sequence {
	t.Helper()
	s, err := r.Open(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

func TestDeterministicSeed(t *testing.T) {
	r := loadTiny(t, nil)
	run := func(seed uint32) []int {
		s := openSeq(t, r, SeqOptions{Sampling: Sampling{Temperature: 1, TopK: 40, Seed: seed}})
		_, err := s.AppendText(context.Background(), "user: tell me a story about the sea\nassistant:")
		require.NoError(t, err)
		toks, _, _ := generate(t, s, GenerateOptions{MaxTokens: 24})
		return toks
	}
	a, b, c := run(1), run(1), run(2)
	require.Equal(t, a, b, "same seed and history give the same tokens")
	require.NotEqual(t, a, c, "another seed gives other tokens")
}

// script is one sequence's randomized workload; run replays it.
type script struct {
	seed   uint32
	prompt string
	more   string
	abort  bool
}

func (sc script) run(ctx context.Context, r *Runner, jitter *rand.Rand) ([]int, error) {
	s, err := r.Open(ctx, SeqOptions{Sampling: Sampling{Seed: sc.seed}})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	sleep := func() {
		if jitter != nil {
			time.Sleep(time.Duration(jitter.IntN(3)) * time.Millisecond)
		}
	}
	var out []int
	collect := func(p Piece) error {
		if p.Token >= 0 {
			out = append(out, p.Token)
		}
		return nil
	}
	if _, err := s.AppendText(ctx, sc.prompt); err != nil {
		return nil, err
	}
	sleep()
	if _, err := s.Generate(ctx, GenerateOptions{MaxTokens: 12}, collect); err != nil {
		return nil, err
	}
	sleep()
	if _, err := s.AppendText(ctx, sc.more); err != nil {
		return nil, err
	}
	if sc.abort {
		// Abort from another goroutine while the Generate runs; the tokens are not compared.
		n := 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = s.Generate(ctx, GenerateOptions{MaxTokens: 1000}, func(Piece) error {
				n++
				return nil
			})
		}()
		time.Sleep(time.Duration(1+jitter.IntN(5)) * time.Millisecond)
		s.Abort(false)
		<-done
		return nil, nil
	}
	if _, err := s.Generate(ctx, GenerateOptions{MaxTokens: 12}, collect); err != nil {
		return nil, err
	}
	return out, nil
}

func randomText(rng *rand.Rand, words int) string {
	w := make([]string, words)
	for i := range w {
		w[i] = dummyWords[rng.IntN(len(dummyWords))]
	}
	return strings.Join(w, " ")
}

// TestConcurrentSequencesOwnTokens runs 16 sequences at once in random order and checks that
// each produced exactly what it produces alone (same seed and history). It samples greedily:
// llama.cpp's batched kernels round differently from single-token ones, so a temperature draw
// that lands on a near-tie can flip (seen once in ~300 tokens); greedy is stable across batch
// shapes and still catches any mix-up of logits rows, samplers or KV cells between sequences.
func TestConcurrentSequencesOwnTokens(t *testing.T) {
	r := loadTiny(t, nil)
	rng := rand.New(rand.NewPCG(42, 1))
	scripts := make([]script, 16)
	for i := range scripts {
		scripts[i] = script{seed: uint32(100 + i), prompt: randomText(rng, 5+rng.IntN(60)),
			more: randomText(rng, 1+rng.IntN(20)), abort: i%5 == 4}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want := make([][]int, len(scripts))
	for i, sc := range scripts {
		if sc.abort {
			continue
		}
		var err error
		want[i], err = sc.run(ctx, r, nil)
		require.NoError(t, err)
		require.Len(t, want[i], 24)
	}
	got := make([][]int, len(scripts))
	errs := make([]error, len(scripts))
	var wg sync.WaitGroup
	for i, sc := range rng.Perm(len(scripts)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			jitter := rand.New(rand.NewPCG(uint64(i), 9))
			got[sc], errs[sc] = scripts[sc].run(ctx, r, jitter)
		}()
	}
	wg.Wait()
	for i := range scripts {
		require.NoError(t, errs[i], "sequence %d", i)
		if !scripts[i].abort {
			require.Equal(t, want[i], got[i], "sequence %d got other tokens when batched", i)
		}
	}
	require.Eventually(t, func() bool { return r.LiveSequences() == 0 }, 5*time.Second, 10*time.Millisecond)
}

func TestOpenCloseNoSlotLeak(t *testing.T) {
	r := loadTiny(t, func(c *Config) { c.MaxSequences = 4 })
	ctx := context.Background()
	for i := range 1000 {
		s, err := r.Open(ctx, SeqOptions{})
		require.NoError(t, err)
		if i%10 == 0 {
			_, err := s.AppendText(ctx, "hello there friend")
			require.NoError(t, err)
		}
		s.Close()
	}
	require.Equal(t, 0, r.LiveSequences())
	var seqs []*Sequence
	for range 4 {
		s, err := r.Open(ctx, SeqOptions{})
		require.NoError(t, err)
		seqs = append(seqs, s)
	}
	_, err := r.Open(ctx, SeqOptions{})
	require.ErrorIs(t, err, ErrNoFreeSlot)
	require.NotErrorIs(t, err, ErrKVReserved)
	require.Equal(t, int64(1), r.KVStats().RefusedSlots)
	for _, s := range seqs {
		s.Close()
	}
	require.Equal(t, 0, r.LiveSequences())
}

func TestAppendAfterGenerateContinuesHistory(t *testing.T) {
	r := loadTiny(t, nil)
	s := openSeq(t, r, SeqOptions{Sampling: Sampling{Seed: 3}})
	ctx := context.Background()
	st, err := s.AppendText(ctx, "user: hello\nassistant:")
	require.NoError(t, err)
	toks, _, _ := generate(t, s, GenerateOptions{MaxTokens: 8})
	require.Len(t, toks, 8)
	require.Equal(t, st.Tokens+8, s.HistoryLen())

	before := s.decoded.Load()
	next, err := r.Tokenize("\nuser: and the weather today\nassistant:")
	require.NoError(t, err)
	st2, err := s.Append(ctx, next)
	require.NoError(t, err)
	require.Equal(t, len(next), st2.Tokens)
	require.Equal(t, st.Tokens+8+len(next), s.HistoryLen())
	_, _, res := generate(t, s, GenerateOptions{MaxTokens: 4})
	// Only the new input was prefilled: the last generated token (sampled, not yet decoded)
	// plus the appended tokens; nothing from before was recomputed.
	require.Equal(t, int64(len(next)+1+3), s.decoded.Load()-before, "prefill + 3 decode steps")
	require.Equal(t, 1, res.Stats.TokensIn, "Append left only its last token for Generate")
}

func TestAbortStopsAtOnce(t *testing.T) {
	r := loadTiny(t, nil)
	s := openSeq(t, r, SeqOptions{Sampling: Sampling{Temperature: 1, TopK: 40}})
	ctx := context.Background()
	_, err := s.AppendText(ctx, "user: talk\nassistant:")
	require.NoError(t, err)
	base := s.HistoryLen()
	started := make(chan struct{})
	var once sync.Once
	type result struct {
		res GenerateResult
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		res, err := s.Generate(ctx, GenerateOptions{}, func(Piece) error {
			once.Do(func() { close(started) })
			return nil
		})
		done <- result{res, err, time.Now()}
	}()
	<-started
	t0 := time.Now()
	s.Abort(false)
	got := <-done
	require.NoError(t, got.err)
	require.Equal(t, "abort", got.res.FinishReason)
	require.Less(t, got.at.Sub(t0), 250*time.Millisecond, "a step of the tiny model takes well under a millisecond")
	require.Eventually(t, func() bool { return s.HistoryLen() == base }, time.Second, time.Millisecond,
		"abort without history drops the generated tokens")
	// The sequence keeps working.
	toks, _, _ := generate(t, s, GenerateOptions{MaxTokens: 3})
	require.Len(t, toks, 3)
}

func TestContextCancelAndEmitError(t *testing.T) {
	r := loadTiny(t, nil)
	s := openSeq(t, r, SeqOptions{})
	_, err := s.AppendText(context.Background(), "hello")
	require.NoError(t, err)
	boom := errors.New("client gone")
	res, err := s.Generate(context.Background(), GenerateOptions{MaxTokens: 50}, func(Piece) error { return boom })
	require.ErrorIs(t, err, boom)
	require.Equal(t, "abort", res.FinishReason)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	res, err = s.Generate(ctx, GenerateOptions{}, func(Piece) error { return nil })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, "abort", res.FinishReason)
	toks, _, _ := generate(t, s, GenerateOptions{MaxTokens: 2})
	require.Len(t, toks, 2)
}

func TestBusyAndClosed(t *testing.T) {
	r := loadTiny(t, nil)
	s := openSeq(t, r, SeqOptions{})
	_, err := s.AppendText(context.Background(), "hello")
	require.NoError(t, err)
	block := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Generate(context.Background(), GenerateOptions{MaxTokens: 5}, func(Piece) error {
			<-block
			return nil
		})
		done <- err
	}()
	require.Eventually(t, func() bool {
		_, err := s.AppendText(context.Background(), "more")
		return errors.Is(err, ErrBusy)
	}, time.Second, time.Millisecond)
	close(block)
	require.NoError(t, <-done)
	s.Close()
	_, err = s.AppendText(context.Background(), "x")
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.Generate(context.Background(), GenerateOptions{}, func(Piece) error { return nil })
	require.ErrorIs(t, err, ErrClosed)
}

// TestSlowConsumerDoesNotStall checks that a caller that stops reading only pauses its own
// sequence.
func TestSlowConsumerDoesNotStall(t *testing.T) {
	r := loadTiny(t, nil)
	ctx := context.Background()
	slow := openSeq(t, r, SeqOptions{Sampling: Sampling{Temperature: 1, TopK: 40}})
	fast := openSeq(t, r, SeqOptions{})
	for _, s := range []*Sequence{slow, fast} {
		_, err := s.AppendText(ctx, "hello")
		require.NoError(t, err)
	}
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := slow.Generate(ctx, GenerateOptions{MaxTokens: 500}, func(Piece) error {
			<-release
			return nil
		})
		done <- err
	}()
	toks, _, _ := generate(t, fast, GenerateOptions{MaxTokens: 200})
	require.Len(t, toks, 200)
	close(release)
	require.NoError(t, <-done)
}

func TestStopStrings(t *testing.T) {
	r := loadTiny(t, nil)
	s := openSeq(t, r, SeqOptions{Sampling: Sampling{Seed: 11, Temperature: 1, TopK: 40}})
	ctx := context.Background()
	_, err := s.AppendText(ctx, "user: say something\nassistant:")
	require.NoError(t, err)
	_, text, _ := generate(t, s, GenerateOptions{MaxTokens: 10})
	words := strings.Fields(text)
	require.Len(t, words, 10)
	// Replay with the 6th word as a stop string: generation ends before it.
	s2 := openSeq(t, r, SeqOptions{Sampling: Sampling{Seed: 11, Temperature: 1, TopK: 40}})
	_, err = s2.AppendText(ctx, "user: say something\nassistant:")
	require.NoError(t, err)
	stop := " " + words[5]
	_, text2, res := generate(t, s2, GenerateOptions{MaxTokens: 10, Stop: []string{stop}})
	require.Equal(t, "stop", res.FinishReason)
	require.NotContains(t, text2, stop)
	require.True(t, strings.HasPrefix(text, text2), "%q vs %q", text, text2)
}

func TestReleasable(t *testing.T) {
	for _, tc := range []struct {
		text    string
		stops   []string
		want    string
		stopped bool
	}{
		{"hello world", nil, "hello world", false},
		{"hello wor", []string{"world"}, "hello ", false},
		{"hello world and", []string{"world"}, "hello ", true},
		{"a\xc3", nil, "a", false},
		{"ab", []string{"x", "b"}, "a", true},
		{"abc", []string{"cd"}, "ab", false},
	} {
		got, stopped := releasable(tc.text, tc.stops)
		require.Equal(t, tc.want, got, fmt.Sprint(tc))
		require.Equal(t, tc.stopped, stopped, fmt.Sprint(tc))
	}
}

// A cancelled append stops its prefill within a step: a long prompt whose caller left (response
// .cancel, barge-in, disconnect) is rolled back instead of burning the CPU to its end, and the
// sequence stays usable.
func TestCancelledAppendStopsPrefill(t *testing.T) {
	r := loadTiny(t, func(c *Config) { c.PrefillChunk = 16; c.SeqContext = 4096 })
	s := openSeq(t, r, SeqOptions{})
	long := make([]int, 3000)
	for i := range long {
		long[i] = 10 + i%50
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := s.Append(ctx, long); errc <- err }()
	require.Eventually(t, func() bool { return s.decoded.Load() >= 64 }, 30*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	// Append returns after the scheduler's step that rolled it back: a caller that appends
	// again at once finds the sequence as it was.
	require.Positive(t, s.cancelledTokens.Load())
	require.Equal(t, 0, s.HistoryLen())
	stopped := s.decoded.Load()
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, stopped, s.decoded.Load(), "no prefill after the cancel")
	require.Less(t, stopped, int64(len(long)/2), "the prefill stopped early")
	require.Equal(t, 0, s.HistoryLen(), "the cancelled append is rolled back")
	// The sequence is still usable.
	_, err := s.AppendText(context.Background(), "user: hello\nassistant:")
	require.NoError(t, err)
	toks, _, _ := generate(t, s, GenerateOptions{MaxTokens: 4})
	require.NotEmpty(t, toks)
}

// Prefill chunks of different sequences interleave: a short prompt appended while a long one
// prefills is done long before it, not after it.
func TestPrefillInterleaves(t *testing.T) {
	r := loadTiny(t, func(c *Config) { c.PrefillChunk = 16; c.BatchSize = 32; c.SeqContext = 4096; c.ContextSize = 2 * 4096 })
	big, small := openSeq(t, r, SeqOptions{}), openSeq(t, r, SeqOptions{})
	long := make([]int, 2000)
	for i := range long {
		long[i] = 10 + i%50
	}
	bigDone := make(chan error, 1)
	go func() {
		_, err := big.Append(context.Background(), long)
		bigDone <- err
	}()
	require.Eventually(t, func() bool { return big.decoded.Load() >= 32 }, 30*time.Second, time.Millisecond)
	_, err := small.Append(context.Background(), long[:40])
	require.NoError(t, err)
	atSmall := big.decoded.Load()
	require.NoError(t, <-bigDone)
	t.Logf("big prompt: %d of %d tokens prefilled when the small one (40) was done", atSmall, len(long))
	require.Less(t, atSmall, int64(len(long)/2), "the small prompt did not wait for the big one")
}

// TestRollbackForgetsSpeculation: a turn appended and generated after a Mark and then rolled
// back leaves no trace: the next turn generates exactly what a sequence that never saw it
// generates (greedy), and the history length is back at the mark.
func TestRollbackForgetsSpeculation(t *testing.T) {
	r := loadTiny(t, nil)
	ctx := context.Background()
	run := func(speculate bool) []int {
		s := openSeq(t, r, SeqOptions{})
		_, err := s.AppendText(ctx, "user: hello\nassistant:")
		require.NoError(t, err)
		generate(t, s, GenerateOptions{MaxTokens: 6})
		if speculate {
			m := s.Mark()
			_, err := s.AppendText(ctx, "\nuser: go forward ten meters\nassistant:")
			require.NoError(t, err)
			generate(t, s, GenerateOptions{MaxTokens: 5})
			require.Greater(t, s.HistoryLen(), m.n)
			require.NoError(t, s.Rollback(ctx, m))
			require.Equal(t, m.n, s.HistoryLen())
		}
		_, err = s.AppendText(ctx, "\nuser: turn left\nassistant:")
		require.NoError(t, err)
		toks, _, _ := generate(t, s, GenerateOptions{MaxTokens: 8})
		require.ErrorIs(t, s.Rollback(ctx, Mark{n: 1 << 20}), ErrMarkLost, "a mark past the end")
		return toks
	}
	require.Equal(t, run(false), run(true))
}

// Released text is valid UTF-8: each run of invalid bytes (byte tokens a random sampler drew)
// becomes one U+FFFD, so that what a client receives and what the server keeps are the same
// string; valid text and held-back rune starts are untouched.
func TestValidText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"hello", "hello"},
		{"caf\u00e9", "caf\u00e9"},
		{"a\xffb", "a\uFFFDb"},
		{"\x80\x80x", "\uFFFDx"},
		{"ok \xe2\x82", "ok \uFFFD"},
	} {
		require.Equal(t, tc.want, validText(tc.in), "%q", tc.in)
	}
	// releasable holds an incomplete rune back, so a split character is never replaced.
	text, _ := releasable("price \xe2\x82", nil)
	require.Equal(t, "price ", validText(text))
}
