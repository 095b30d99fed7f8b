package stage

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
)

// The prefill of a message is stage-0 work of the turn it leads to, also when Respond follows
// at once (the session commits and responds in one job): the turn number is fixed when the
// message is added, not when the sequence goroutine gets to the prefill, by which time Respond
// has started the turn and "the upcoming turn" is the one after.
func TestDuplexPrefillRowsBelongToTheirTurn(t *testing.T) {
	p, _ := newTestPipeline(t, nil)
	sink := newRecSink(t)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{MaxTokens: 4}, RequestID: "duplex-prefill"}, sink)
	require.NoError(t, err)
	defer d.Close()
	ctx := context.Background()
	for i, text := range []string{"go forward ten meters", "and then turn left"} {
		want := i + 1
		require.NoError(t, d.AppendText(ctx, 0, "user", text))
		turn, err := d.Respond(ctx, 0, 0)
		require.NoError(t, err)
		require.Equal(t, want, turn)
		// The turn's end is reported after its last row (Finished output may come first).
		sms := sink.waitTurnEnd(t, turn, 20*time.Second)
		in := 0
		for _, m := range sms {
			if m.StageID == 0 && m.Metrics.NumTokensIn > 0 {
				require.LessOrEqual(t, m.Turn, turn, "a stage-0 row billed to a turn not started yet: %+v", m)
				if m.Turn == turn {
					in += m.Metrics.NumTokensIn
				}
			}
		}
		// The user's words and the generation prompt: more than the prompt alone.
		require.Greater(t, in, 4, "turn %d: its user message's prefill is its own", turn)
	}
}

// The stream reports the caller's turn ids, never a count of its own: a response runs under
// the id given to Respond, with the rows of its input and its own tagged with it, and input
// given with an id whose response already started is the next turn's. Ids need not be
// consecutive (the session skips one at input_audio_buffer.clear).
func TestDuplexReportsTheCallersTurnIDs(t *testing.T) {
	p, _ := newTestPipeline(t, nil)
	sink := newRecSink(t)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{MaxTokens: 4}, RequestID: "duplex-ids"}, sink)
	require.NoError(t, err)
	defer d.Close()
	ctx := context.Background()

	require.NoError(t, d.AppendText(ctx, 3, "user", "go forward ten meters"))
	n, err := d.Respond(ctx, 3, 0)
	require.NoError(t, err)
	require.Equal(t, 3, n, "the response runs under the given id")
	sink.waitTurnEnd(t, 3, 20*time.Second)

	// Input given with the answered id (the caller had not learnt of the answer yet) is the
	// next turn's, and so is a response asked for it.
	require.NoError(t, d.AppendText(ctx, 3, "user", "and then turn left"))
	n, err = d.Respond(ctx, 3, 0)
	require.NoError(t, err)
	require.Equal(t, 4, n, "an answered id is never reused")
	sink.waitTurnEnd(t, 4, 20*time.Second)

	outs, sms, txs := sink.snapshot()
	for _, m := range sms {
		// The instructions are prefilled at open, as input of the stream's first id (1).
		require.Contains(t, []int{1, 3, 4}, m.Turn, "row %+v", m)
	}
	for _, o := range outs {
		require.Contains(t, []int{3, 4}, o.Turn, "output %+v", o)
	}
	for _, e := range txs {
		require.Contains(t, []int{3, 4}, e.Turn, "transfer %+v", e)
	}
}
