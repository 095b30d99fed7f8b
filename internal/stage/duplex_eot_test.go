package stage

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
)

// TestDuplexEndOfTurn: in a pause after "go forward ten meters" the stream scores the ASR's
// partial hypothesis (not the final transcript: the utterance is still open) with the thinker;
// the estimate is a probability, the same when asked twice, and the stream goes on as without
// it: the commit transcribes the utterance and a response answers it. On the dummy model the
// number itself means nothing; the real signal needs a real GGUF.
func TestDuplexEndOfTurn(t *testing.T) {
	p, _ := newTestPipeline(t, func(c *PipelineConfig) { c.Thinker.EndOfTurn = endOfTurnThinker })
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{MaxTokens: 4, Instructions: "be brief"}, RequestID: "duplex-eot"}, newRecSink(t))
	require.NoError(t, err)
	defer d.Close()
	ctx := context.Background()

	estimate := func() EndOfTurn {
		wait, err := d.StartEndOfTurn(ctx)
		require.NoError(t, err)
		e, err := wait(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, e.Prob, 0.0)
		require.LessOrEqual(t, e.Prob, 1.0)
		return e
	}
	empty := estimate()
	require.Empty(t, empty.Text, "nothing heard yet")

	feedUnits(t, d, goForward(t))
	start := time.Now()
	first := estimate()
	t.Logf("estimate on %q: p=%.3g in %v (the partial, the render and the score on dummy:tiny)", first.Text, first.Prob, time.Since(start))
	require.GreaterOrEqual(t, wordOverlap(first.Text, "go forward ten meters"), 0.75, "partial %q", first.Text)
	var took []time.Duration
	var again EndOfTurn
	for range 9 {
		start = time.Now()
		again = estimate()
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("the same estimate 9 times: min %v, median %v, max %v", took[0], took[4], took[8])
	require.Equal(t, first, again, "the same partial scores the same")
	require.NotEqual(t, empty.Prob, first.Prob, "other words, another probability")

	tr, err := d.commit(ctx, 0, false)
	require.NoError(t, err)
	require.Equal(t, first.Text, tr.Text, "the pause's partial is the utterance's transcript here")
	turn, err := d.Respond(ctx, 0, 4)
	require.NoError(t, err)
	require.Equal(t, 1, turn)
}

// TestDuplexEndOfTurnSource: pipeline.thinker.end_of_turn decides whether the thinker is asked.
// "auto" does not ask a dummy model (its probability means nothing: its sessions keep the
// silence windows), "off" asks none, and a value outside the three is a config error.
func TestDuplexEndOfTurnSource(t *testing.T) {
	for _, tc := range []struct{ source, why string }{
		{endOfTurnAuto, "the dummy model's probability means nothing"},
		{endOfTurnOff, "pipeline.thinker.end_of_turn is off"},
	} {
		t.Run(tc.source, func(t *testing.T) {
			p, _ := newTestPipeline(t, func(c *PipelineConfig) { c.Thinker.EndOfTurn = tc.source })
			d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{MaxTokens: 4}, RequestID: "duplex-eot-" + tc.source}, newRecSink(t))
			require.NoError(t, err)
			defer d.Close()
			_, err = d.StartEndOfTurn(context.Background())
			require.ErrorIs(t, err, ErrNoEndOfTurn)
			require.ErrorContains(t, err, tc.why)
		})
	}
	cfg := DefaultPipelineConfig()
	cfg.Thinker.EndOfTurn = "sometimes"
	require.ErrorContains(t, cfg.validate(), "thinker.end_of_turn")
}
