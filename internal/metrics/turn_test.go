package metrics

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Ports of the pure-metrics tests of vllm-omni's tests/metrics/test_duplex_turn_metrics.py
// (#1-#6, #8, #9, #10, #19, #23, #24, #26, numbered as in the list in
// internal/requestclient/turn_reference_test.go). The request-state tests (#7, #11-#18, #20-#22,
// #25) belong to internal/requestclient. Where omniserve deliberately differs from the reference
// the comment says "Differs from the reference" and why.

var metricsRID = DuplexResourceRequestID("sid-metrics", 0, 0, "stage0")

func newTestTurn(t *testing.T, clk *fakeClock, resp string, turnID int) *TurnMetrics {
	t.Helper()
	return newTurn(metricsRID, resp, turnID, clk.now(), 3, clk.now)
}

// #2 test_accumulate_appends_segments_collapse_at_finalize.
func TestAccumulateSegmentsCollapseAtFinalize(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(100)
	turn := newTestTurn(t, clk, "resp-collapse", 1)
	turn.Accumulate(0, StageRequestStats{NumTokensIn: 10, NumTokensOut: 4, StageGenTimeMs: 15, VllmTtftMs: 12,
		VllmItlsMs: []float64{8}, VllmTpotMs: 10}, "text", 0)
	turn.Accumulate(0, StageRequestStats{NumTokensIn: 8, NumTokensOut: 6, StageGenTimeMs: 20, VllmTtftMs: 30,
		VllmItlsMs: []float64{9}, VllmTpotMs: 20}, "text", 0)
	turn.Accumulate(1, StageRequestStats{AudioDurationS: 0.25, AudioGeneratedFrames: 4000}, "audio", 0)
	turn.Accumulate(1, StageRequestStats{AudioDurationS: 0.5, AudioGeneratedFrames: 8000}, "audio", 0)
	require.Equal(t, 4, turn.SegmentCount())

	clk.set(101)
	require.True(t, turn.Finalize(ReasonStop, nil, true))
	rec, ok := turn.Record()
	require.True(t, ok)
	evs := rec.Stages
	require.Len(t, evs, 2)
	s0, s1 := evs[0], evs[1]
	require.Equal(t, []int{0, 1}, []int{s0.StageID, s1.StageID})
	require.Equal(t, 18, s0.NumTokensIn)
	require.Equal(t, 10, s0.NumTokensOut)
	require.InDelta(t, 35.0, s0.StageGenTimeMs, 1e-12)
	require.InDelta(t, 12.0, s0.VllmTtftMs, 0)
	require.Equal(t, []float64{8, 9}, s0.VllmItlsMs)
	require.InDelta(t, (10.0*3+20*5)/8, s0.VllmTpotMs, 1e-12)
	require.InDelta(t, 0.75, s1.AudioDurationS, 1e-12)
	require.Equal(t, 12000, s1.AudioGeneratedFrames)
	require.Equal(t, "resp-collapse", s0.RequestID)
	require.Equal(t, "resp-collapse", rec.E2E.RequestID)
	require.Equal(t, int64(18+10), rec.E2E.E2ETotalTokens)
}

// #3 test_finalize_logs_once_with_identity_line (226b43d9: no total=/engine=).
func TestFinalizeLogsOnceWithIdentityLine(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(100)
	turn := newTestTurn(t, clk, "resp-turn", 3)
	turn.Accumulate(0, StageRequestStats{NumTokensOut: 2, StageGenTimeMs: 5}, "text", 0)
	log, logs := observedLogger()
	require.True(t, turn.Finalize(ReasonStop, log, true))
	require.False(t, turn.Finalize(ReasonClose, log, true), "second finalize is a no-op")

	msgs := messages(logs)
	require.Equal(t, 1, countPrefix(msgs, "\n[Overall Summary]"), "one summary")
	require.Equal(t, 1, countPrefix(msgs, "[OmniTiming] "))
	var line string
	for _, m := range msgs {
		if strings.HasPrefix(m, "[OmniTiming] ") {
			line = m
		}
	}
	require.Contains(t, line, metricsRID)
	require.Contains(t, line, "response=resp-turn")
	require.Contains(t, line, "turn=3")
	require.Contains(t, line, "reason=stop")
	require.NotContains(t, line, "total=")
	require.NotContains(t, line, "engine=")
	_, closed := turn.Record()
	require.True(t, closed)
	require.Equal(t, ReasonStop, turn.finishedReason())
}

// #4 test_finished_reason_passthrough.
func TestFinishedReasonPassthrough(t *testing.T) {
	t.Parallel()
	for _, r := range []string{ReasonBargeIn, ReasonCancel, ReasonClose, ReasonAbort, ReasonError, "oops"} {
		t.Run(r, func(t *testing.T) {
			t.Parallel()
			clk := newFakeClock(1)
			turn := newTestTurn(t, clk, "resp-"+r, 0)
			log, logs := observedLogger()
			require.True(t, turn.Finalize(r, log, true))
			want := r
			if r == "oops" {
				want = ReasonAbort
			}
			require.Equal(t, want, turn.finishedReason())
			require.Contains(t, strings.Join(messages(logs), "\n"), "reason="+want)
		})
	}
}

// #6 test_accumulate_prefers_stage_submit_ts.
func TestAccumulatePrefersStageSubmitTS(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(200)
	turn := newTurn(metricsRID, "resp-ts", 0, 150, 3, clk.now)
	turn.Accumulate(0, StageRequestStats{NumTokensOut: 1}, "text", 100)
	turn.Accumulate(1, StageRequestStats{NumTokensOut: 1}, "audio", 0)
	f, l, ok := turn.StageTimes(0)
	require.True(t, ok)
	require.InDelta(t, 100.0, f, 0)
	require.InDelta(t, 200.0, l, 0)
	f, _, _ = turn.StageTimes(1)
	require.InDelta(t, 200.0, f, 0)
}

// #8 test_metrics_before_begin_are_flushed_on_begin. Differs from the reference: a duplex turn
// is born at its first input and the input's rows accumulate into it directly (merged per
// stage), so nothing is buffered and replayed, and a long listen-only stretch cannot grow
// without bound; its response is attached when it begins.
func TestInputTurnKeepsRowsBeforeBegin(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(60)
	turn := NewInputTurn(metricsRID, 50, 3, clk.now)
	require.False(t, turn.Begun())
	turn.Accumulate(0, StageRequestStats{NumTokensOut: 7, StageGenTimeMs: 30}, "text", 50)
	require.True(t, turn.Begin("resp-auto", 1))
	require.False(t, turn.Begin("resp-other", 2), "a turn begins once")
	require.Equal(t, "resp-auto", turn.ResponseID())
	require.InDelta(t, 50.0, turn.Arrival(), 0)
	rows := turn.StageRows()
	require.Len(t, rows, 1)
	require.Equal(t, 7, rows[0].NumTokensOut)
	require.Equal(t, "resp-auto", rows[0].RequestID, "rows before the begin carry the response id")
	require.InDelta(t, 30.0, rows[0].StageGenTimeMs, 0)
	f, _, _ := turn.StageTimes(0)
	require.InDelta(t, 50.0, f, 0, "the first submit ts is kept")
}

// A long listen-only stretch before the begin keeps one merged row per stage, with the same
// result as accumulating every snapshot into a turn whose response was known from the start
// (RX edges recorded before the begin move to the response id).
func TestInputTurnIsBoundedAndEqualsOneForOne(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(10)
	born := NewInputTurn(metricsRID, 10, 2, clk.now)
	direct := newTurn(metricsRID, "resp-direct", 0, 10, 2, clk.now)
	for i := range 5000 {
		s := StageRequestStats{NumTokensIn: 3, NumTokensOut: 2 + i%5, StageGenTimeMs: 1.5,
			VllmTpotMs: float64(10 + i%7), VllmItlsMs: []float64{float64(i % 3)}}
		born.Accumulate(0, s, "text", 0)
		direct.Accumulate(0, s, "text", 0)
		if i%10 == 0 {
			r := StageRequestStats{NumTokensOut: 1, RxDecodeTimeMs: 0.5, RxInFlightTimeMs: 0.25, RxTransferBytes: 64}
			born.Accumulate(1, r, "audio", 0)
			direct.Accumulate(1, r, "audio", 0)
		}
	}
	require.True(t, born.Begin("resp-direct", 0))
	require.Equal(t, direct.StageRows(), born.StageRows())
	require.Equal(t, 5500, born.SegmentCount())
	clk.set(11)
	require.True(t, born.Finalize(ReasonStop, nil, false))
	require.True(t, direct.Finalize(ReasonStop, nil, false))
	bornRec, _ := born.Record()
	directRec, _ := direct.Record()
	require.Equal(t, directRec.Transfers, bornRec.Transfers)
	tr := bornRec.Transfers
	require.Len(t, tr, 1)
	require.InDelta(t, 250.0, tr[0].RxDecodeTimeMs, 1e-9)
	require.Equal(t, int64(64), tr[0].SizeBytes)
}

// #9 test_finalize_noop_when_log_stats_off.
func TestFinalizeNoLogWhenLogStatsOff(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(1)
	turn := newTestTurn(t, clk, "resp-off", 0)
	log, logs := observedLogger()
	require.True(t, turn.Finalize(ReasonStop, log, false))
	require.Zero(t, logs.Len())
	require.Empty(t, turn.summarySnapshot().Entries)
}

// #10 test_client_two_turns_emit_two_summaries: each turn owns a fresh aggregator.
func TestTwoTurnsTwoSummaries(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(1)
	var all []string
	for _, resp := range []string{"resp-a", "resp-b"} {
		turn := newTurn(metricsRID, resp, 0, 0, 3, clk.now)
		turn.Accumulate(0, StageRequestStats{NumTokensOut: 1}, "text", 0)
		log, logs := observedLogger()
		require.True(t, turn.Finalize(ReasonStop, log, true))
		all = append(all, strings.Join(messages(logs), "\n"))
	}
	require.Contains(t, all[0], "resp-a")
	require.NotContains(t, all[0], "resp-b")
	require.Contains(t, all[1], "resp-b")
	require.NotContains(t, all[1], "resp-a")
}

// #19 test_session_transfer_tx_copied_into_turn. Differs from the reference: a send is recorded
// on its turn when it happens (the session tags it with the turn), so no session-wide TX is copied
// and baselined afterwards; its TX and the receiving stage's RX land on one edge of the turn.
func TestTransferTXAndRXOnTheTurnsEdge(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(1)
	turn := newTurn(metricsRID, "resp-tx", 0, 2, 3, clk.now)
	turn.AddTransfer(0, 1, 1024, 7.5, 0, true)
	turn.Accumulate(1, StageRequestStats{RxDecodeTimeMs: 1.0, RxInFlightTimeMs: 0.5, RxTransferBytes: 4096}, "audio", 0)
	clk.set(3)
	require.True(t, turn.Finalize(ReasonStop, nil, true))
	rec, _ := turn.Record()
	tr := rec.Transfers
	require.Len(t, tr, 1)
	require.Equal(t, TransferEdgeStats{FromStage: 0, ToStage: 1, RequestID: "resp-tx", SizeBytes: 1024,
		TxTimeMs: 7.5, UsedShm: true, RxDecodeTimeMs: 1.0, InFlightTimeMs: 0.5}, tr[0])
}

// #23 test_mark_turn_arrival_stamps_before_begin (the keep-first stamp and the next turn's
// own t0 live in requestclient, where turns are born: duplex_test.go:TestDuplexTurnMetricsSemantics).
// A turn born at its input keeps that t0 whenever its response begins; the input end defaults
// to t0 (a text item) unless one was marked, and the engine's endpoint only fills a missing one.
func TestInputTurnKeepsItsT0AndInputEnd(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(42)
	turn := NewInputTurn(metricsRID, 0, 3, clk.now)
	require.InDelta(t, 42.0, turn.Arrival(), 0, "t0 <= 0 is now")

	clk.set(99)
	require.True(t, turn.Begin("resp-arr", 1))
	require.InDelta(t, 42.0, turn.Arrival(), 0, "t0 is the first input, not the begin")
	clk.set(100)
	require.True(t, turn.Finalize(ReasonStop, nil, false))
	rec, _ := turn.Record()
	require.InDelta(t, 42.0, rec.tables.wallStart, 0, "the Overall Summary's wall time starts at t0")
	e := rec.E2E
	require.InDelta(t, 58000.0, e.E2ETotalMs, 1e-6)
	require.Zero(t, e.InputMs, "a text item's input ends where it starts")

	spoken := NewInputTurn(metricsRID, 10, 3, clk.now)
	spoken.MarkInputEnd(12)
	spoken.MarkInputEndIfUnset(15) // the engine's endpoint does not override speech_stopped
	require.True(t, spoken.Begin("resp-spoken", 2))
	clk.set(20)
	require.True(t, spoken.Finalize(ReasonStop, nil, false))
	rec, _ = spoken.Record()
	e = rec.E2E
	require.InDelta(t, 2000.0, e.InputMs, 1e-6)
}

// #24 test_duplex_dump_titles_hide_ttfo_and_skip_total_engine. Differs from the reference:
// serving_time_to_first_output_ms is a real duration (arrival → first output) and is shown; the
// reference stored an epoch timestamp there and hid the row.
func TestDuplexDumpTitlesShowTTFOAndSkipTotalEngine(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(1000)
	turn := newTurn(metricsRID, "resp-dump", 4, 1000, 3, clk.now)
	// An engine that (wrongly) reports an epoch value is overridden by the turn's own mark.
	turn.Accumulate(0, StageRequestStats{NumTokensOut: 3, ServingTimeToFirstOutputMs: 1_757_000_000.0}, "text", 0)
	turn.MarkFirstOutput(0, 1000.25, false)
	turn.MarkFirstOutput(0, 1000.75, false) // first mark wins
	clk.set(1001)
	log, logs := observedLogger()
	require.True(t, turn.Finalize(ReasonStop, log, true))
	text := strings.Join(messages(logs), "\n")
	require.Contains(t, text, "request_id="+metricsRID)
	require.Contains(t, text, "response=resp-dump")
	require.Contains(t, text, "turn=4")
	require.Contains(t, text, "reason=stop")
	require.Contains(t, text, "[StageRequestStats [request_id="+metricsRID+" response=resp-dump turn=4 reason=stop]]")
	require.Contains(t, text, "| serving_time_to_first_output_ms | 250.000 |")
	require.NotContains(t, text, "1,757,000,000")
	require.NotContains(t, text, "total=")
	require.NotContains(t, text, "engine=")
}

// panicCore makes the table log entries blow up, like a failing build_and_log_summary.
type panicCore struct{ zapcore.Core }

func (c panicCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if strings.HasPrefix(e.Message, "\n[") {
		panic("render failure")
	}
	return c.Core.Check(e, ce)
}

func (c panicCore) With(f []zapcore.Field) zapcore.Core { return panicCore{c.Core.With(f)} }

// A failing table render (the reference's test_finalize_survives_summary_failure) is a bug:
// it panics to the caller's goroutine root, which logs and counts it (omniserve_panics_total).
// The turn is finalized once all the same and its record survives.
func TestFinalizeSurvivesSummaryFailure(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(1)
	turn := newTestTurn(t, clk, "resp-fail", 0)
	turn.Accumulate(0, StageRequestStats{NumTokensOut: 1}, "text", 0)
	base, _ := observedLogger()
	log := zap.New(panicCore{base.Core()})
	require.PanicsWithValue(t, "render failure", func() { turn.Finalize(ReasonStop, log, true) })
	require.True(t, turn.Finalized())
	require.False(t, turn.Finalize(ReasonStop, log, true), "finalized once, even after a failed render")
	_, ok := turn.Record()
	require.True(t, ok, "the e2e record survives a logging failure")
}

func TestFinalizedTurnIgnoresLateInput(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(1)
	turn := newTestTurn(t, clk, "resp-late", 0)
	require.True(t, turn.Finalize(ReasonCancel, nil, false))
	turn.Accumulate(0, StageRequestStats{NumTokensOut: 5}, "text", 0)
	turn.MarkFirstOutput(0, 5, true)
	require.Zero(t, turn.SegmentCount())
	rec, _ := turn.Record()
	require.Empty(t, rec.Stages)
}

// Accumulate copies its input: later mutation of the caller's snapshot changes nothing.
func TestAccumulateIsDefensive(t *testing.T) {
	t.Parallel()
	clk := newFakeClock(1)
	turn := newTestTurn(t, clk, "resp-copy", 0)
	s := StageRequestStats{VllmItlsMs: []float64{1, 2}, PipelineTimings: map[string]float64{"preprocess_ms": 1},
		StageStats: &stageStats{TotalToken: 3}}
	turn.Accumulate(0, s, "text", 0)
	s.VllmItlsMs[0] = 100
	s.PipelineTimings["preprocess_ms"] = 100
	s.StageStats.TotalToken = 100
	r := turn.StageRows()[0]
	require.Equal(t, []float64{1, 2}, r.VllmItlsMs)
	require.InDelta(t, 1.0, r.PipelineTimings["preprocess_ms"], 0)
	require.Equal(t, 3, r.StageStats.TotalToken)
}

func TestTurnRecordForPrometheus(t *testing.T) {
	t.Parallel()
	turn, _ := duplexExample(t)
	_, ok := turn.Record()
	require.False(t, ok)
	require.True(t, turn.Finalize("turn_detected", nil, false))
	rec, ok := turn.Record()
	require.True(t, ok)
	require.True(t, rec.Duplex)
	require.Equal(t, ReasonAbort, rec.FinishedReason, "Finalize normalizes; map cancel sources first")
	require.InDelta(t, 0.826903, rec.AudioTTFPSeconds, 1e-6)
	require.Equal(t, 2, rec.AudioTTFPStage)
	require.Len(t, rec.Stages, 3)
	require.Len(t, rec.Transfers, 2)
}

// With log-stats off callers keep nil turns and buffers (the reference still built aggregators
// and copied every snapshot); every call is a no-op that allocates nothing.
func TestOffPathDoesNotAllocate(t *testing.T) {
	var turn *TurnMetrics
	var c *Collectors
	s := StageRequestStats{NumTokensOut: 3, VllmItlsMs: []float64{1}}
	allocs := testing.AllocsPerRun(100, func() {
		turn.Accumulate(0, s, "text", 5)
		turn.MarkFirstOutput(1, 5, true)
		_ = turn.Finalize(ReasonStop, nil, false)
		_ = turn.Begin("resp-off", 1)
		turn.MarkInputEndIfUnset(5)
		c.ObserveFinalized(FinalizedRequest{})
	})
	require.Zero(t, allocs)
}
