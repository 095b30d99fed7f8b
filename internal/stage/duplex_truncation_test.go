package stage

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
)

// A long conversation on the real engine stays within its budget: with retention_ratio the
// stream drops whole turns now and then (OutTruncated, down to the retention share), every turn
// is answered, and the sequence never outgrows the window; with truncation disabled, the turn
// that no longer fits fails with a context-length error and nothing is dropped.
func TestDuplexTruncation(t *testing.T) {
	const turns = 30
	tests := []struct {
		name  string
		trunc duplex.Truncation
	}{
		{"retention_ratio", duplex.Truncation{Mode: duplex.TruncationRetentionRatio, RetentionRatio: 0.5, PostInstructions: 200}},
		{"auto", duplex.Truncation{Mode: duplex.TruncationAuto}},
		{"disabled", duplex.Truncation{Mode: duplex.TruncationDisabled}},
	}
	p, eng := newTestPipeline(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := newRecSink(t)
			d, err := p.OpenDuplex(context.Background(), DuplexOptions{Options: duplex.Options{MaxTokens: 16,
				Instructions: "You are a robot that drives where it is told.", Truncation: tt.trunc}, RequestID: "duplex-trunc-" + tt.name}, sink)
			require.NoError(t, err)
			defer d.Close()
			ctx := context.Background()
			failed := 0
			n, text := turns, "go forward ten meters and then turn left at the second corner please"
			if tt.trunc.Mode != duplex.TruncationRetentionRatio {
				text = strings.Repeat(text+" ", 4) // the whole window (1024 tokens) must fill up
			}
			for i := range n {
				require.NoError(t, d.AppendText(ctx, i+1, "user", text))
				turn, err := d.Respond(ctx, i+1, 0)
				require.NoError(t, err)
				sink.waitTurnEnd(t, turn, 30*time.Second)
				require.LessOrEqual(t, d.conv.seq.HistoryLen(), eng.Info().SeqContext)
				if hasError(sink, turn) {
					failed++
				}
			}
			outs, _, _ := sink.snapshot()
			var drops []*duplex.Truncated
			for _, o := range outs {
				if o.Kind == duplex.OutTruncated {
					drops = append(drops, o.Truncated)
				}
			}
			if tt.trunc.Mode == duplex.TruncationDisabled {
				require.Empty(t, drops, "nothing is dropped with truncation disabled")
				require.Positive(t, failed, "a turn past the window fails")
				for _, o := range outs {
					if o.Kind == duplex.OutError {
						require.ErrorIs(t, o.Err, ErrContextLength)
						require.Contains(t, o.Err.Error(), "truncation is disabled")
					}
				}
				return
			}
			require.Zero(t, failed, "every turn is answered")
			require.GreaterOrEqual(t, len(drops), 2, "the conversation outgrew its budget more than once")
			require.Less(t, len(drops), n/3, "drops come in chunks, not on every turn")
			requirePrefixReused(t, outs)
			b := newBudget(eng.Info().SeqContext, 16, 0, tt.trunc)
			prev := 0
			for _, tr := range drops {
				require.Greater(t, tr.Through, prev, "each drop takes newer turns")
				require.Greater(t, tr.TokensBefore, tr.TokensAfter)
				require.LessOrEqual(t, tr.TokensAfter, b.target(), "a drop keeps the retention share")
				require.Positive(t, tr.Messages)
				prev = tr.Through
			}
		})
	}
}

// requirePrefixReused checks that between drops a turn prefills its own input only (the rest of
// its prompt is cached), as much as the first turns' inputs, and that a drop turn prefills the
// kept turns again.
func requirePrefixReused(t *testing.T, outs []OutputMessage) {
	t.Helper()
	dropTurn := map[int]bool{}
	for _, o := range outs {
		if o.Kind == duplex.OutTruncated {
			dropTurn[o.Turn] = true
		}
	}
	own := 0 // the most a turn before any drop prefilled (turns 2–4: the first has the instructions)
	uncached := map[int]int{}
	for _, o := range outs {
		if o.Kind == duplex.OutUsage && !o.Usage.Final {
			uncached[o.Turn] = o.Usage.InputTokens - o.Usage.CachedTokens
			if o.Turn >= 2 && o.Turn <= 4 {
				own = max(own, uncached[o.Turn])
			}
		}
	}
	require.Positive(t, own)
	for n, u := range uncached {
		if dropTurn[n] {
			require.Greater(t, u, own, "turn %d dropped the oldest turns and prefilled the kept ones", n)
		} else if n > 1 {
			require.LessOrEqual(t, u, own+8, "turn %d read its cached prefix", n)
		}
	}
}

// hasError reports whether turn n's outputs include an error.
func hasError(s *recSink, n int) bool {
	outs, _, _ := s.snapshot()
	for _, o := range outs {
		if o.Turn == n && o.Kind == duplex.OutError {
			return true
		}
	}
	return false
}
