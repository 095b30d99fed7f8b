package metrics

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRequestTurnClosesOnceWithItsReason: a chat request's turn is ended once by its owner with
// its finished reason, rows of its stages that arrive after the end (a partial snapshot after
// an abort) still join it until it is reported, and its one record carries the reason, the e2e
// from req_start to the end, the rows (one per snapshot, as vllm-omni's chat tables print them),
// the edge and the audio time to first packet, the same with or without the tables.
func TestRequestTurnClosesOnceWithItsReason(t *testing.T) {
	t.Parallel()
	for _, tables := range []bool{true, false} {
		for _, reason := range []string{ReasonStop, ReasonLength, reasonToolCalls, ReasonAbort, ReasonError} {
			t.Run(reason, func(t *testing.T) {
				t.Parallel()
				clk := newFakeClock(100)
				turn := NewRequestTurn("chatcmpl-turn", 100, 2, 1, tables, false, clk.now)
				require.Equal(t, tables, turn.HasTables())
				require.True(t, turn.Begun(), "a chat request is keyed by its id from the start")
				require.False(t, turn.Begin("resp-other", 3), "and takes no later response")
				turn.SetRequestStart(100.004)
				turn.MarkFirstOutput(0, 100.05, false)
				turn.Accumulate(0, StageRequestStats{NumTokensIn: 10, NumTokensOut: 4, StageGenTimeMs: 20}, "audio", 100.001)
				turn.AddTransfer(0, 1, 64, 0.5, 0, false)
				turn.MarkFirstOutput(1, 100.2, true)

				clk.set(100.5)
				require.True(t, turn.End(reason))
				require.False(t, turn.End(ReasonStop), "a second close is a no-op")
				turn.SetRequestStart(200) // after the end: e2e keeps its start
				turn.Accumulate(1, StageRequestStats{AudioDurationS: 0.5, RxTransferBytes: 64}, "", 0)

				clk.set(101)
				require.True(t, turn.Finalize(ReasonStop, nil, false))
				require.False(t, turn.Finalize(ReasonStop, nil, false), "reported once")
				turn.Accumulate(0, StageRequestStats{NumTokensOut: 99}, "", 0)
				require.Equal(t, 2, turn.SegmentCount(), "rows after the report are dropped")
				require.Equal(t, reason, turn.finishedReason())

				rec, ok := turn.Record()
				require.True(t, ok)
				require.False(t, rec.Duplex)
				require.Equal(t, reason, rec.FinishedReason, "the owner's reason, not Finalize's")
				require.Equal(t, "chatcmpl-turn", rec.E2E.RequestID)
				require.InDelta(t, 496.0, rec.E2E.E2ETotalMs, 1e-6, "req_start → End, not → report")
				require.Len(t, rec.Stages, 2)
				require.Equal(t, 10, rec.Stages[0].NumTokensIn)
				require.InDelta(t, 0.5, rec.Stages[1].AudioDurationS, 0)
				require.InDelta(t, 0.2, rec.AudioTTFPSeconds, 1e-9)
				require.Equal(t, 1, rec.AudioTTFPStage)
				require.Len(t, rec.Transfers, 1)
				require.Equal(t, int64(64), rec.Transfers[0].SizeBytes)
				require.InDelta(t, 0.5, rec.Transfers[0].TxTimeMs, 0)
				require.Equal(t, int64(14), rec.E2E.E2ETotalTokens, "the rows up to the end")
				require.InDelta(t, 50.0, rec.Stages[0].ServingTimeToFirstOutputMs, 1e-6, "arrival → first output")
				require.Equal(t, tables, len(turn.summarySnapshot().Entries) > 0, "tables only with --log-stats")
			})
		}
	}
}
