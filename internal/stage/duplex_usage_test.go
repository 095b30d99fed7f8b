package stage

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
)

// A duplex response's usage is the engine's own count: what it prefilled for its turn
// (input - cached) is the num_tokens_in of its stage-0 statistics rows and the tokenizer's count
// of the rendered conversation it appended, its output is num_tokens_out, and the second turn
// reads the first one from the KV cache.
func TestDuplexUsageIsTheEnginesCount(t *testing.T) {
	p, eng := newTestPipeline(t, nil)
	sink := newRecSink(t)
	const instructions = "You are a terse assistant."
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{Instructions: instructions, MaxTokens: 6}, RequestID: "duplex-usage"}, sink)
	require.NoError(t, err)
	defer d.Close()
	ctx := context.Background()

	render := func(h []gpu.ChatMessage, gen bool) string {
		s, err := eng.ChatPrompt(h, gen)
		require.NoError(t, err)
		return s
	}
	count := func(text string) int {
		toks, err := eng.Tokenize(text)
		require.NoError(t, err)
		return len(toks)
	}
	hist := []gpu.ChatMessage{{Role: "system", Content: instructions}}
	// The instructions are prefilled on their own at open (BOS first); each user message then
	// by its own prefill job, and the generation prompt by the response: wait for the first, so
	// that the appends, and so their tokens, are the ones the test counts below.
	require.Eventually(t, func() bool {
		_, sms, _ := sink.snapshot()
		return len(sms) > 0
	}, 20*time.Second, 5*time.Millisecond, "the instructions' prefill row")
	sys := render(hist, false)
	sysTokens, _, err := eng.CountTokens(sys, 0)
	require.NoError(t, err)
	fed := sys // the rendered conversation the sequence holds, as the test follows it
	var prev duplex.Usage
	for i, text := range []string{"go forward ten meters", "and then turn left"} {
		turn := i + 1
		require.NoError(t, d.AppendText(ctx, 0, "user", text))
		n, err := d.Respond(ctx, 0, 0)
		require.NoError(t, err)
		require.Equal(t, turn, n)
		sms := sink.waitTurnEnd(t, turn, 20*time.Second)
		require.True(t, sink.waitFor(20*time.Second, finishedTurn(turn)))
		outs, _, _ := sink.snapshot()

		var usages []duplex.Usage
		var reply strings.Builder
		textTokens := 0
		for _, o := range outs {
			if o.Turn != turn {
				continue
			}
			switch o.Kind {
			case duplex.OutUsage:
				usages = append(usages, *o.Usage)
			case duplex.OutText:
				reply.WriteString(o.Text)
				textTokens += o.Tokens
			}
		}
		require.Len(t, usages, 2, "turn %d: one report with the prompt, one final", turn)
		early, u := usages[0], usages[1]
		require.False(t, early.Final)
		require.True(t, u.Final)
		require.Equal(t, early.InputTokens, u.InputTokens)
		require.Equal(t, early.CachedTokens, u.CachedTokens)

		in, out := 0, 0
		for _, m := range sms {
			if m.StageID == 0 && m.Turn == turn {
				in += m.Metrics.NumTokensIn
				out += m.Metrics.NumTokensOut
			}
		}
		t.Logf("turn %d: usage %+v; stats num_tokens_in %d num_tokens_out %d; reply %q", turn, u, in, out, reply.String())
		require.Equal(t, in, u.InputTokens-u.CachedTokens, "turn %d: prefilled tokens = stats num_tokens_in", turn)
		require.Equal(t, out, u.OutputTokens, "turn %d: output tokens = stats num_tokens_out", turn)
		require.Positive(t, u.OutputTokens)
		require.LessOrEqual(t, textTokens, u.OutputTokens, "the Text deltas' tokens are generated tokens")

		// Independently, the tokenizer's count of the rendered conversation the turn appended:
		// the instructions (with BOS, the sequence's first append) on turn 1, then the user
		// message and the generation prompt.
		hist = append(hist, gpu.ChatMessage{Role: "user", Content: text})
		user, want := render(hist, false), render(hist, true)
		delta, ok := strings.CutPrefix(user, fed)
		if !ok {
			// The reply's text is not where the template renders it (here: a leading space
			// the template drops), so the stream appends the new message rendered alone.
			delta = render(hist[len(hist)-1:], false)
		}
		expect := count(delta) + count(strings.TrimPrefix(want, user))
		if turn == 1 {
			expect += sysTokens
			require.Zero(t, u.CachedTokens, "turn 1: a fresh sequence caches nothing")
		} else {
			require.Positive(t, u.CachedTokens, "turn %d reads the earlier turns from the KV cache", turn)
			require.GreaterOrEqual(t, u.CachedTokens, prev.InputTokens, "turn %d: the previous prompt is cached", turn)
		}
		require.Equal(t, expect, u.InputTokens-u.CachedTokens, "turn %d: prefilled tokens = the tokenizer's count of the appended rendering", turn)
		hist = append(hist, gpu.ChatMessage{Role: "assistant", Content: reply.String()})
		fed = want + reply.String()
		prev = u
	}
}

// With a remote thinker the upstream's usage is the response's: its prompt_tokens as input,
// nothing cached, its completion tokens as output, as the statistics report them.
func TestDuplexUsageRemoteThinker(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, func(_ int, w http.ResponseWriter, _ *http.Request, _ *upstream) {
		streamReply(w, "hello", " there")
	})
	p, _ := newTestPipeline(t, func(c *PipelineConfig) {
		rc := u.cfg()
		c.Remote.Thinker = &rc
	})
	sink := newRecSink(t)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{MaxTokens: 8}, RequestID: "duplex-remote-usage"}, sink)
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.AppendText(context.Background(), 0, "user", "hi"))
	turn, err := d.Respond(context.Background(), 0, 0)
	require.NoError(t, err)
	sms := sink.waitTurnEnd(t, turn, 10*time.Second)
	require.True(t, sink.waitFor(10*time.Second, finishedTurn(turn)))
	outs, _, _ := sink.snapshot()
	usages := ofKind(outs, duplex.OutUsage)
	require.Len(t, usages, 1, "only the final report: the prompt is counted upstream")
	got := *usages[0].Usage
	require.Equal(t, duplex.Usage{InputTokens: 7, OutputTokens: 2, Final: true}, got, "the upstream's usage")
	in, out := 0, 0
	for _, m := range sms {
		if m.StageID == 0 && m.Turn == turn {
			in += m.Metrics.NumTokensIn
			out += m.Metrics.NumTokensOut
		}
	}
	require.Equal(t, in, got.InputTokens-got.CachedTokens)
	require.Equal(t, out, got.OutputTokens)
}

// turnUsage waits for turn n's end and returns its final usage and its stage-0 statistics'
// num_tokens_in and num_tokens_out.
func turnUsage(t *testing.T, sink *recSink, n int) (duplex.Usage, int, int) {
	t.Helper()
	sms := sink.waitTurnEnd(t, n, 20*time.Second)
	require.True(t, sink.waitFor(20*time.Second, finishedTurn(n)))
	outs, _, _ := sink.snapshot()
	var u *duplex.Usage
	for _, o := range outs {
		if o.Kind == duplex.OutUsage && o.Turn == n && o.Usage.Final {
			u = o.Usage
		}
	}
	require.NotNil(t, u, "turn %d: a final usage", n)
	in, out := 0, 0
	for _, m := range sms {
		if m.StageID == 0 && m.Turn == n {
			in += m.Metrics.NumTokensIn
			out += m.Metrics.NumTokensOut
		}
	}
	return *u, in, out
}

// Responses with their own instructions over the conversation, and with their own input, bill
// every token they prefill to their turn: usage and statistics agree.
func TestDuplexUsageResponseSpec(t *testing.T) {
	p, _ := newTestPipeline(t, nil)
	sink := newRecSink(t)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{MaxTokens: 4}, RequestID: "duplex-usage-spec"}, sink)
	require.NoError(t, err)
	defer d.Close()
	ctx := context.Background()
	require.NoError(t, d.AppendText(ctx, 0, "user", "go forward ten meters"))
	n, err := d.Respond(ctx, 0, 0)
	require.NoError(t, err)
	first, _, _ := turnUsage(t, sink, n)

	sys := "Answer in one word."
	require.NoError(t, d.AppendText(ctx, 0, "user", "and then turn left"))
	n, err = d.RespondWith(ctx, 0, duplex.ResponseSpec{Instructions: &sys})
	require.NoError(t, err)
	u, in, out := turnUsage(t, sink, n)
	t.Logf("own instructions: %+v, stats in %d out %d", u, in, out)
	require.Equal(t, in, u.InputTokens-u.CachedTokens, "the message, the instructions and the generation prompt")
	require.Equal(t, out, u.OutputTokens)
	require.Equal(t, first.InputTokens+first.OutputTokens, u.CachedTokens, "turn 1 is cached")

	n, err = d.RespondWith(ctx, 0, duplex.ResponseSpec{Input: []duplex.Message{{Role: "user", Text: "hello there"}}, OutOfBand: true})
	require.NoError(t, err)
	u, in, out = turnUsage(t, sink, n)
	t.Logf("own input: %+v, stats in %d out %d", u, in, out)
	require.Zero(t, u.CachedTokens, "a sequence of its own")
	require.Equal(t, in, u.InputTokens)
	require.Equal(t, out, u.OutputTokens)
}
