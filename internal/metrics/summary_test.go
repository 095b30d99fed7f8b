package metrics

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Ports of vllm-omni's tests/metrics/test_stats.py: the tables are a function of the one record
// a chat request or duplex turn closes with.

func TestRecordRendersSummary(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(10)
	turn := NewRequestTurn("r1", 10, 2, 1, true, false, clk.now)
	turn.AddTransfer(0, 1, 1024, 5, 0, false)
	turn.Accumulate(0, StageRequestStats{NumTokensIn: 3, NumTokensOut: 3, StageGenTimeMs: 10}, "text", 0)
	turn.Accumulate(1, StageRequestStats{NumTokensOut: 4, StageGenTimeMs: 20}, "audio", 0)
	clk.set(11)
	s := rendered(t, turn)
	require.Equal(t, s, turn.summarySnapshot().Entries)
	sum := turn.summarySnapshot()
	n, ok := sum.overallValue("e2e_requests")
	require.True(t, ok)
	require.InDelta(t, 1.0, n, 0)
	v, _ := sum.overallValue("e2e_avg_time_per_request_ms")
	require.InDelta(t, 1000.0, v, 1e-9, "wall time over one request")
	r := sum.Request
	require.Equal(t, []int{0, 1}, []int{r.Stages[0].StageID, r.Stages[1].StageID})
	require.Len(t, r.Transfers, 1)
	require.Equal(t, int64(1024), r.Transfers[0].SizeBytes)
	require.Contains(t, strings.Join(s, "\n"), "| size_kbytes | 1.000 |")
	require.Equal(t, int64(10), r.E2E.E2ETotalTokens)
	require.InDelta(t, 1000.0, r.E2E.E2ETotalMs, 1e-9)
}

// A chat request without rows still closes with an e2e record and an [OmniTiming] line.
func TestRecordWithoutRows(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(1)
	turn := NewRequestTurn("r1", 1, 1, 0, true, false, clk.now)
	clk.set(1.5)
	rendered(t, turn)
	s := turn.summarySnapshot()
	require.NotEmpty(t, s.Entries)
	require.Empty(t, s.Request.Stages)
	require.Equal(t, "[OmniTiming] req=r1 total=0.50s engine=0.50s", s.Request.OmniTiming)
}

// A chat request keeps vllm-omni's total= and engine=; one cut short names its reason in its
// titles and, like a duplex turn, leaves them out.
func TestOmniTimingTotalEngineOnlyWithoutIdentity(t *testing.T) {
	t.Parallel()
	for _, reason := range []string{ReasonStop, ReasonAbort} {
		t.Run(reason, func(t *testing.T) {
			t.Parallel()
			clk := newFakeClock(1)
			turn := NewRequestTurn("r1", 1, 1, 0, true, false, clk.now)
			turn.Accumulate(0, StageRequestStats{NumTokensOut: 2, StageGenTimeMs: 250}, "", 0)
			clk.set(2)
			require.True(t, turn.Finalize(reason, nil, true))
			all := strings.Join(turn.summarySnapshot().Entries, "\n")
			if reason == ReasonStop {
				require.Contains(t, all, "[OmniTiming] req=r1 total=1.00s engine=1.00s stages=[0:0.25s]")
				require.Contains(t, all, "[StageRequestStats [request_id=r1]]\n")
				return
			}
			require.Contains(t, all, "[OmniTiming] req=r1 reason=abort stages=[0:0.25s]")
			require.Contains(t, all, "[StageRequestStats [request_id=r1 reason=abort]]\n")
		})
	}
}

// With a preprocess time a duplex turn's [OmniTiming] keeps total= and engine=.
func TestOmniTimingPreprocessKeepsTotalWithIdentity(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(1)
	turn := newTurn("", "resp", 0, 1, 1, clk.now)
	turn.Accumulate(0, StageRequestStats{StageGenTimeMs: 250,
		PipelineTimings: map[string]float64{"preprocess_ms": 100, "ar2diffusion_ms": 3.456}}, "", 0)
	clk.set(2)
	rendered(t, turn)
	require.Equal(t, "[OmniTiming] req=resp response=resp turn=0 reason=stop total=1.00s preprocess=0.10s engine=0.90s stages=[0:0.25s] ar2diffusion=3.46ms",
		turn.summarySnapshot().Request.OmniTiming)
}

func TestFinalizeLogsEachTable(t *testing.T) {
	t.Parallel()
	turn := chatExample(t)
	log, logs := observedLogger()
	require.True(t, turn.Finalize(ReasonStop, log, false), "a chat request opened with tables logs them")
	s := turn.summarySnapshot()
	msgs := messages(logs)
	require.Len(t, msgs, 5)
	require.Len(t, s.Entries, 5)
	for i, m := range msgs {
		if i == 2 {
			require.True(t, strings.HasPrefix(m, "[OmniTiming] req="+chatRID+" "), m)
			continue
		}
		require.True(t, strings.HasPrefix(m, "\n["), m)
		require.Equal(t, "\n"+s.Entries[i], m)
	}
	for _, e := range logs.All() {
		require.Equal(t, "info", e.Level.String())
	}

	off := NewRequestTurn("r", 1, 1, 0, false, false, newFakeClock(1).now)
	log2, logs2 := observedLogger()
	require.True(t, off.Finalize(ReasonStop, log2, true))
	require.Empty(t, off.summarySnapshot().Entries)
	require.Zero(t, logs2.Len())
}
