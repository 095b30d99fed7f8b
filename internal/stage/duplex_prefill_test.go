package stage

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The prefill of a message is stage-0 work of the turn it leads to, also when Respond follows
// at once (the session commits and responds in one job): the turn number is fixed when the
// message is added, not when the sequence goroutine gets to the prefill, by which time Respond
// has started the turn and "the upcoming turn" is the one after.
func TestDuplexPrefillRowsBelongToTheirTurn(t *testing.T) {
	p, _ := newTestPipeline(t, nil)
	sink := newRecSink(t)
	d, err := p.OpenDuplex(context.Background(), DuplexOptions{RequestID: "duplex-prefill", MaxTokens: 4}, sink)
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
