package metrics

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Ports of vllm-omni's tests/metrics/test_stats.py.

func TestAggregatorBuildsSummary(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(10)
	a := newAggregator(2, true, 10, 1, withClock(clk.now))
	a.onForward(0, 1, "r1", 1024, 5, false)
	a.onStageMetrics(0, "r1", StageRequestStats{NumTokensIn: 3, NumTokensOut: 3, StageGenTimeMs: 10}, "text")
	a.onStageMetrics(1, "r1", StageRequestStats{NumTokensOut: 4, StageGenTimeMs: 20}, "audio")
	clk.set(11)
	a.onFinalizeRequest(1, "r1", 10)

	s := a.buildAndLogSummary(nil)
	n, ok := s.overallValue("e2e_requests")
	require.True(t, ok)
	require.InDelta(t, 1.0, n, 0)
	require.Len(t, s.Requests, 1)
	r := s.Requests[0]
	require.Equal(t, []int{0, 1}, []int{r.Stages[0].StageID, r.Stages[1].StageID})
	require.Len(t, r.Transfers, 1)
	require.Equal(t, int64(1024), r.Transfers[0].SizeBytes)
	require.Contains(t, strings.Join(s.Entries, "\n"), "| size_kbytes | 1.000 |")
	require.Equal(t, int64(10), r.E2E.E2ETotalTokens)
	require.InDelta(t, 1000.0, r.E2E.E2ETotalMs, 1e-9)
	require.Equal(t, map[string]int{"*": 1}, s.FinalStageIDs)
}

func TestBuildAndLogSummaryE2EOnly(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(1)
	a := newAggregator(1, true, 1, 0, withClock(clk.now))
	clk.set(1.5)
	a.onFinalizeRequest(0, "r1", 1)
	s := a.buildAndLogSummary(nil)
	require.NotEmpty(t, s.Entries)
	require.Len(t, s.Requests, 1)
	require.Empty(t, s.Requests[0].Stages)
	require.Equal(t, "[OmniTiming] req=r1 total=0.50s engine=0.50s", s.Requests[0].OmniTiming)
}

func TestBuildAndLogSummaryMultipleRequests(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(1)
	finals := map[string]int{"r1": 1, "r2": 0}
	a := newAggregator(2, true, 1, 1, withClock(clk.now), withFinalStages(finals))
	a.onStageMetrics(0, "r2", StageRequestStats{NumTokensOut: 1}, "")
	a.onStageMetrics(0, "r1", StageRequestStats{NumTokensOut: 2}, "")
	a.onStageMetrics(1, "r1", StageRequestStats{NumTokensOut: 3}, "")
	clk.set(2)
	a.onFinalizeRequest(a.finalStageOf("r1"), "r1", 1)
	a.onFinalizeRequest(a.finalStageOf("r2"), "r2", 1)
	s := a.buildAndLogSummary(nil)
	require.Equal(t, finals, s.FinalStageIDs)
	require.Len(t, s.Requests, 2)
	require.Equal(t, "r1", s.Requests[0].RequestID)
	require.Len(t, s.Requests[0].Stages, 2)
	require.Equal(t, "r2", s.Requests[1].RequestID)
	require.Len(t, s.Requests[1].Stages, 1)
	v, _ := s.overallValue("e2e_requests")
	require.InDelta(t, 2.0, v, 0)
	// e2e_avg_time_per_request_ms is wall / count, not the mean of e2e_total_ms.
	v, _ = s.overallValue("e2e_avg_time_per_request_ms")
	require.InDelta(t, 500.0, v, 1e-9)
}

func TestOmniTimingKeepsTotalEngineWithoutIdentity(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(1)
	a := newAggregator(1, true, 1, 0, withClock(clk.now))
	a.onStageMetrics(0, "r1", StageRequestStats{NumTokensOut: 2, StageGenTimeMs: 250}, "")
	clk.set(2)
	a.onFinalizeRequest(0, "r1", 1)
	entries := a.render()
	all := strings.Join(entries, "\n")
	require.Contains(t, all, "total=1.00s")
	require.Contains(t, all, "engine=1.00s")
	require.Contains(t, all, "[StageRequestStats [request_id=r1]]\n")

	a.setTimingIdentity(&timingIdentity{Req: "duplex-x", Response: "resp-1", Turn: -1, Reason: "stop"})
	all = strings.Join(a.render(), "\n")
	require.NotContains(t, all, "total=")
	require.NotContains(t, all, "engine=")
	require.Contains(t, all, "[StageRequestStats [request_id=duplex-x response=resp-1 reason=stop]]")
	require.Contains(t, all, "[OmniTiming] req=duplex-x response=resp-1 reason=stop stages=[0:0.25s]")
}

func TestOmniTimingPreprocessKeepsTotalWithIdentity(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(1)
	a := newAggregator(1, true, 1, 0, withClock(clk.now))
	a.onStageMetrics(0, "r1", StageRequestStats{StageGenTimeMs: 250,
		PipelineTimings: map[string]float64{"preprocess_ms": 100, "ar2diffusion_ms": 3.456}}, "")
	clk.set(2)
	a.onFinalizeRequest(0, "r1", 1)
	a.setTimingIdentity(&timingIdentity{Response: "resp", Turn: 0})
	s := a.buildAndLogSummary(nil)
	require.Equal(t, "[OmniTiming] req=r1 response=resp turn=0 total=1.00s preprocess=0.10s engine=0.90s stages=[0:0.25s] ar2diffusion=3.46ms",
		s.Requests[0].OmniTiming)
}

func TestStageTimesPreferSubmit(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(200)
	a := newAggregator(2, true, 0, 1, withClock(clk.now))
	a.markStageTimes(0, 100)
	a.markStageTimes(1, 0)
	f, l, ok := a.StageTimes(0)
	require.True(t, ok)
	require.InDelta(t, 100.0, f, 0)
	require.InDelta(t, 200.0, l, 0)
	f, _, _ = a.StageTimes(1)
	require.InDelta(t, 200.0, f, 0)
	clk.set(300)
	a.markStageTimes(0, 50) // first is kept
	f, l, _ = a.StageTimes(0)
	require.InDelta(t, 100.0, f, 0)
	require.InDelta(t, 300.0, l, 0)
	_, _, ok = a.StageTimes(5)
	require.False(t, ok)
}

func TestFinalizeRequestOnce(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(1)
	a := newAggregator(1, true, 1, 0, withClock(clk.now))
	clk.set(2)
	a.onFinalizeRequest(0, "r", 1)
	clk.set(5)
	a.onFinalizeRequest(0, "r", 1)
	e, ok := a.e2e("r")
	require.True(t, ok)
	require.InDelta(t, 1000.0, e.E2ETotalMs, 1e-9)
	v, _ := a.buildAndLogSummary(nil).overallValue("e2e_requests")
	require.InDelta(t, 1.0, v, 0)
}

func TestBuildAndLogSummaryLogsEachTable(t *testing.T) {
	t.Parallel()
	a := chatExample(t)
	log, logs := observedLogger()
	s := a.buildAndLogSummary(log)
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

	off := newAggregator(1, false, 0, 0)
	off.onFinalizeRequest(0, "r", 0)
	log2, logs2 := observedLogger()
	require.Empty(t, off.buildAndLogSummary(log2).Entries)
	require.Zero(t, logs2.Len())
}
