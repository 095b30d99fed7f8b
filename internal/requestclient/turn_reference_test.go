package requestclient

// The reference test list (vllm-omni's tests/metrics/test_duplex_turn_metrics.py at 226b43d9, 26
// tests), ported with the same intent to omniserve's types. Where omniserve deliberately differs
// from the reference the port asserts the corrected behaviour; those rows say so.
//
//	#  reference test                                              Go test (file:TestName)
//	1  is_duplex_resource_request_id_matches_engine_format         internal/metrics/reasons_test.go:TestIsDuplexResourceRequestID
//	2  accumulate_appends_segments_collapse_at_finalize            internal/metrics/turn_test.go:TestAccumulateSegmentsCollapseAtFinalize
//	3  finalize_logs_once_with_identity_line                       internal/metrics/turn_test.go:TestFinalizeLogsOnceWithIdentityLine
//	4  finished_reason_passthrough                                 internal/metrics/turn_test.go:TestFinishedReasonPassthrough
//	5  finished_reason_for_cancel_mapping           (changed)      internal/metrics/reasons_test.go:TestFinishedReasonForCancel
//	6  accumulate_prefers_stage_submit_ts                          internal/metrics/turn_test.go:TestAccumulatePrefersStageSubmitTS
//	7  stage_metrics_message_forwards_submit_ts                    turn_reference_test.go:TestRefStageMetricsMessageForwardsSubmitTS
//	8  metrics_before_begin_are_flushed_on_begin    (changed)      turn_reference_test.go:TestRefMetricsBeforeBeginFlushedOnBegin,
//	                                                               internal/metrics/turn_test.go:TestPendingIsBoundedAndEqualsOneForOne
//	9  finalize_noop_when_log_stats_off             (changed)      duplex_test.go:TestDuplexLogStatsOffAllocatesNothing,
//	                                                               turn_reference_test.go:TestRefLogStatsOffCollectsNothing
//	10 client_two_turns_emit_two_summaries                         turn_reference_test.go:TestRefTwoTurnsEmitTwoSummaries
//	11 begin_preregisters_and_ignores_chat_ids      (adapted)      turn_reference_test.go:TestRefBeginPreregistersAndIgnoresChatIDs
//	12 stage_metrics_message_records_into_open_turn                turn_reference_test.go:TestRefStageMetricsAndOutputRecordIntoOpenTurn
//	13 chat_log_summary_and_cleanup_does_not_use_duplex_turn (adapted) turn_reference_test.go:TestRefBeginPreregistersAndIgnoresChatIDs,
//	                                                               test/duplex_logstats_test.go:TestDuplexLogStats/chat_and_duplex_rows
//	14 session_begin_end_hooks_capture_ids_before_clear            internal/session/session_test.go:TestCancelFinalizesBeforeEpochAdvance
//	15 signal_barge_in_finalizes_before_pop                        turn_reference_test.go:TestRefSignalBargeInFinalizesBeforePop
//	16 close_without_open_turn_does_not_log                        turn_reference_test.go:TestRefCloseWithoutOpenTurnDoesNotLog
//	17 close_open_turn_emits_close                                 turn_reference_test.go:TestRefCloseOpenTurnEmitsClose
//	18 session_close_cancel_then_close_logs_once                   turn_reference_test.go:TestRefSessionCloseCancelThenCloseLogsOnce
//	19 session_transfer_tx_copied_into_turn                        internal/metrics/turn_test.go:TestSessionTXCopiedIntoTurn,
//	                                                               turn_reference_test.go:TestRefSessionTransferTXCopiedIntoTurn
//	20 abort_emits_table_once_then_close_is_noop    (changed)      turn_reference_test.go:TestRefAbortEmitsOnceThenCloseIsNoop
//	21 duplex_direct_output_does_not_double_count_stage0           turn_reference_test.go:TestRefDecisionOutputNotCountedTwice
//	22 chat_request_does_not_buffer_duplex_pending  (adapted)      turn_reference_test.go:TestRefBeginPreregistersAndIgnoresChatIDs
//	23 mark_turn_arrival_stamps_before_begin        (+ changed)    internal/metrics/turn_test.go:TestMarkArrivalKeepsFirst,
//	                                                               internal/metrics/turn_test.go:TestArrivalStampSurvivesPreviousFinalize,
//	                                                               duplex_test.go:TestDuplexTurnMetricsSemantics
//	24 duplex_dump_titles_hide_ttfo_and_skip_total_engine (changed) internal/metrics/turn_test.go:TestDuplexDumpTitlesShowTTFOAndSkipTotalEngine
//	25 response_hooks_do_not_raise_into_begin_end  (changed)      internal/session/session_test.go:TestPanicEndsSessionNotProcess
//	26 finalize_survives_summary_failure           (changed)      internal/metrics/turn_test.go:TestFinalizeSurvivesSummaryFailure
//
// Changed, and why:
//   - #5: `turn_detected` (server-VAD barge-in) maps to barge_in, not cancel; an engine error maps
//     to error, not stop. The reference logged a real barge-in as a cancel and a failed turn as a
//     normal one.
//   - #8: pre-begin snapshots are merged per stage as they arrive, so the pending buffer
//     holds one row per stage, not one per chunk; the flushed turn is the same as one-for-one replay.
//     Only user input stamps t0: a snapshot that arrives before any input is dropped, not stamped.
//   - #9: with --log-stats off no turn exists at all: FinalizeTurn returns false (the
//     reference built the aggregator and returned True) and nothing allocates.
//   - #11/#13/#22: omniserve keeps chat and duplex request states apart by type (a chat request
//     never reaches Duplex), so "ignores chat ids" becomes: the duplex state is registered under
//     the 8-part stage-0 id, and chat ids do not parse as duplex ids.
//   - #20: Abort ends the stream, so the request state is dropped after the finalize (the
//     reference kept it registered because generate() cleaned up later; omniserve has no
//     generate() owner for the duplex state).
//   - #23: a stamp set after the current turn opened survives its finalize: on an auto-response
//     handoff it is the next turn's t0, which the reference wiped.
//   - #25/#26: a panic in a hook or in the table render is a bug, not an expected event: it is
//     not swallowed where it happens (the reference's try/except around each hook) but
//     recovered at the goroutine's root, logged with its stack and counted in
//     omniserve_panics_total; the session ends with an error event and reason internal_error.
//     The turn is still finalized exactly once and its record survives.
//   - #24: serving_time_to_first_output_ms is a real duration from the turn's arrival and is
//     shown, instead of an epoch value that had to be hidden.

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/stage"
)

// refDuplex is the reference's `_client()`: three stages, log_stats on, a settable clock.
func refDuplex(t *testing.T, log *zap.Logger) (*DuplexRequest, *Client, *float64) {
	t.Helper()
	now := new(float64)
	*now = 200
	fs := &fakeStream{t: t}
	c := New(nil, Options{LogStats: true, Clock: func() float64 { return *now }}, log)
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	d := c.newDuplex(Fence{SessionID: "sid-metrics"}, "", 3, func(duplex.Output) {})
	d.start(fs)
	t.Cleanup(func() { _ = d.Close(context.Background(), "") })
	return d, c, now
}

func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.InfoLevel)
	return zap.New(core), logs
}

// summaries counts the logged [OmniTiming] lines, one per finalized, logged turn.
func summaries(logs *observer.ObservedLogs, parts ...string) int {
	return countLogged(logs, append([]string{"[OmniTiming] "}, parts...)...)
}

func TestRefStageMetricsMessageForwardsSubmitTS(t *testing.T) {
	d, _, _ := refDuplex(t, zap.NewNop())
	d.BeginTurn(1, "resp-ts", 1, 0)
	d.OnStageMetrics(stage.StageMetricsMessage{RequestID: d.Stage0ID(), StageID: 0, Turn: 1, Metrics: stageSnap(5), StageSubmitTS: 50})
	first, last, ok := d.turns.openTurn(1).StageTimes(0)
	require.True(t, ok)
	require.Equal(t, 50.0, first, "the first stage time prefers stage_submit_ts")
	require.Equal(t, 200.0, last, "the last stage time is receipt time")
}

func TestRefMetricsBeforeBeginFlushedOnBegin(t *testing.T) {
	d, _, _ := refDuplex(t, zap.NewNop())
	m := metrics.StageRequestStats{NumTokensOut: 7, StageGenTimeMs: 30}
	// Changed: only user input stamps t0. A snapshot before any input (server-side silence,
	// setup) belongs to no turn and is dropped; it does not stamp.
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: m, StageSubmitTS: 40})
	require.Zero(t, d.turns.openCount(), "silence never stamps: no turn is born")
	d.MarkTurnArrival(1, 50)
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: m, StageSubmitTS: 51})
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: m, StageSubmitTS: 52})
	require.Len(t, d.turns.openTurn(1).StageRows(), 1, "the turn holds one merged row per stage")
	require.Equal(t, 50.0, d.turns.openTurn(1).Arrival())

	d.BeginTurn(1, "resp-auto", 1, 0)
	turn := d.turns.openTurn(1)
	require.Equal(t, 50.0, turn.Arrival())
	rows := turn.StageRows()
	require.Len(t, rows, 1)
	require.Equal(t, 14, rows[0].NumTokensOut)
	require.Equal(t, 60.0, rows[0].StageGenTimeMs)
}

func TestRefLogStatsOffCollectsNothing(t *testing.T) {
	log, logs := observed()
	fs := &fakeStream{t: t}
	d, _, _ := newTestDuplex(t, Options{}, log, fs)
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Metrics: stageSnap(5)})
	d.BeginTurn(1, "resp-off", 1, 0)
	require.Nil(t, d.turns, "no aggregator, pending buffer or turn")
	require.False(t, d.finalizeTurn(1, "stop"), "with --log-stats off no turn exists: nothing to finalize")
	require.NoError(t, d.Close(context.Background(), ""))
	require.Zero(t, logs.Len())
}

func TestRefTwoTurnsEmitTwoSummaries(t *testing.T) {
	log, logs := observed()
	d, _, now := refDuplex(t, log)
	for i, id := range []string{"resp-a", "resp-b"} {
		d.BeginTurn(i+1, id, i+1, 0)
		d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: i + 1, Metrics: stageSnap(5)})
		*now++
		require.True(t, d.finalizeTurn(i+1, "stop"))
	}
	require.Equal(t, 2, summaries(logs))
	for _, e := range logs.All() {
		require.False(t, strings.Contains(e.Message, "resp-a") && strings.Contains(e.Message, "resp-b"),
			"each summary holds only its own turn: %s", e.Message)
	}
	require.Equal(t, 1, summaries(logs, "response=resp-a"))
	require.Equal(t, 1, summaries(logs, "response=resp-b"))
	require.Zero(t, d.turns.openCount())
}

func TestRefBeginPreregistersAndIgnoresChatIDs(t *testing.T) {
	d, c, _ := refDuplex(t, zap.NewNop())
	c.mu.Lock()
	kind := c.states[d.Stage0ID()]
	c.mu.Unlock()
	require.Equal(t, "duplex", kind, "the duplex state exists before any engine output")
	require.True(t, metrics.IsDuplexResourceRequestID(d.Stage0ID()))
	d.BeginTurn(1, "resp-pre", 1, 0)
	require.NotNil(t, d.turns.openTurn(1))
	for _, chat := range []string{"chatcmpl-1", "chatcmpl-abc-1234abcd", "duplex-sid-e0-stage0"} {
		require.False(t, metrics.IsDuplexResourceRequestID(chat), chat)
	}
	d.BeginTurn(2, "", 2, 0)
	require.Nil(t, d.turns.openTurn(2), "an empty response id opens nothing")
	require.Equal(t, "resp-pre", d.turns.openTurn(1).ResponseID())
}

func TestRefStageMetricsAndOutputRecordIntoOpenTurn(t *testing.T) {
	d, _, _ := refDuplex(t, zap.NewNop())
	d.BeginTurn(1, "resp-rec", 1, 0)
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: metrics.StageRequestStats{NumTokensIn: 10, NumTokensOut: 4, StageGenTimeMs: 15}})
	d.OnOutput(stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutFinished, Turn: 1}, StageID: 1, Finished: true, Metrics: &metrics.StageRequestStats{AudioGeneratedFrames: 12000, AudioDurationS: 0.5}})
	rows := d.turns.openTurn(1).StageRows()
	require.Len(t, rows, 2)
	require.Equal(t, 0, rows[0].StageID)
	require.Equal(t, 4, rows[0].NumTokensOut)
	require.Equal(t, 1, rows[1].StageID)
	require.Equal(t, 12000, rows[1].AudioGeneratedFrames)
}

func TestRefSignalBargeInFinalizesBeforePop(t *testing.T) {
	var d *DuplexRequest
	var c *Client
	var registeredAtLog atomic.Int32
	old := Fence{SessionID: "sid-metrics"}.stage0ID()
	core, logs := observer.New(zapcore.InfoLevel)
	log := zap.New(core, zap.Hooks(func(e zapcore.Entry) error {
		if strings.HasPrefix(e.Message, "[OmniTiming] ") {
			c.mu.Lock()
			if _, ok := c.states[old]; ok {
				registeredAtLog.Add(1)
			}
			c.mu.Unlock()
		}
		return nil
	}))
	d, c, _ = refDuplex(t, log)
	d.BeginTurn(1, "resp-barge", 1, 0)
	require.NoError(t, d.Signal(context.Background(), "barge_in", Fence{SessionID: "sid-metrics", Epoch: 1}))
	require.Equal(t, 1, summaries(logs, "response=resp-barge", "reason=barge_in"))
	require.Equal(t, int32(1), registeredAtLog.Load(), "the old epoch's state still existed when its turn was logged")
	c.mu.Lock()
	_, stillOld := c.states[old]
	c.mu.Unlock()
	require.False(t, stillOld, "popped after the finalize")
	// A re-signal that moves no epoch must not finalize the turn that is open now.
	d.BeginTurn(2, "resp-next", 2, 0)
	require.NoError(t, d.Signal(context.Background(), "response.cancel", Fence{SessionID: "sid-metrics", Epoch: 1}))
	require.Equal(t, "resp-next", d.turns.openTurn(2).ResponseID())
	require.Zero(t, summaries(logs, "response=resp-next"))
}

func TestRefCloseWithoutOpenTurnDoesNotLog(t *testing.T) {
	log, logs := observed()
	d, c, _ := refDuplex(t, log)
	require.NoError(t, d.Close(context.Background(), ""))
	require.Zero(t, logs.Len())
	require.Zero(t, c.Live(), "the state is dropped")
}

func TestRefCloseOpenTurnEmitsClose(t *testing.T) {
	log, logs := observed()
	d, c, _ := refDuplex(t, log)
	d.BeginTurn(1, "resp-close", 1, 0)
	require.NoError(t, d.Close(context.Background(), ""))
	require.Equal(t, 1, summaries(logs, "response=resp-close", "reason=close"))
	require.Zero(t, c.Live())
}

func TestRefSessionCloseCancelThenCloseLogsOnce(t *testing.T) {
	log, logs := observed()
	d, _, _ := refDuplex(t, log)
	d.BeginTurn(1, "resp-sc", 1, 0)
	require.True(t, d.finalizeTurn(1, metrics.FinishedReasonForCancel(metrics.CancelSessionClose)))
	require.NoError(t, d.Close(context.Background(), metrics.ReasonClose))
	require.Equal(t, 1, summaries(logs))
	require.Equal(t, 1, summaries(logs, "reason=close"))
}

func TestRefSessionTransferTXCopiedIntoTurn(t *testing.T) {
	d, _, _ := refDuplex(t, zap.NewNop())
	rid := d.Stage0ID()
	d.OnTransfer(stage.TransferEvent{From: 0, To: 1, RequestID: rid, Turn: 1, SizeBytes: 512, TxMs: 3})
	d.BeginTurn(1, "resp-tx", 1, 0)
	d.OnTransfer(stage.TransferEvent{From: 0, To: 1, RequestID: rid, Turn: 1, SizeBytes: 1024, TxMs: 7.5, UsedShm: true})
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 1, Turn: 1, Metrics: metrics.StageRequestStats{RxDecodeTimeMs: 1, RxInFlightTimeMs: 0.5, RxTransferBytes: 1024}})
	turn := d.turns.openTurn(1)
	require.True(t, d.finalizeTurn(1, "stop"))
	rec, ok := turn.Record()
	require.True(t, ok)
	edges := rec.Transfers
	require.Len(t, edges, 1)
	require.Equal(t, 7.5, edges[0].TxTimeMs, "TX before begin is excluded")
	require.Equal(t, int64(1024), edges[0].SizeBytes)
	require.Equal(t, 1.0, edges[0].RxDecodeTimeMs)
	require.Equal(t, 0.5, edges[0].InFlightTimeMs)
	require.True(t, edges[0].UsedShm)
}

func TestRefAbortEmitsOnceThenCloseIsNoop(t *testing.T) {
	log, logs := observed()
	d, c, _ := refDuplex(t, log)
	d.BeginTurn(1, "resp-abort", 1, 0)
	d.Abort()
	require.Equal(t, 1, summaries(logs, "response=resp-abort", "reason=abort"))
	require.False(t, d.finalizeTurn(1, metrics.ReasonAbort), "a second finalize does nothing")
	require.NoError(t, d.Close(context.Background(), ""))
	require.Equal(t, 1, summaries(logs))
	require.Zero(t, c.Live(), "changed: Abort ends the stream, so its state is dropped")
}

func TestRefDecisionOutputNotCountedTwice(t *testing.T) {
	d, _, _ := refDuplex(t, zap.NewNop())
	d.BeginTurn(1, "resp-dec", 1, 0)
	m := metrics.StageRequestStats{NumTokensIn: 10, NumTokensOut: 4, StageGenTimeMs: 15}
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: m})
	d.OnOutput(stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutDecision, Turn: 1, Decision: duplex.DecisionSpeak}, StageID: 0, Finished: true, Metrics: &m})
	require.Equal(t, 1, d.turns.openTurn(1).SegmentCount())
	rows := d.turns.openTurn(1).StageRows()
	require.Len(t, rows, 1)
	require.Equal(t, 10, rows[0].NumTokensIn)
	require.Equal(t, 4, rows[0].NumTokensOut)
	require.Equal(t, 15.0, rows[0].StageGenTimeMs)
}

// Not in the reference list: a barged-in response's abort rows reach the client after its turn
// was finalized (end_response runs before the engine abort); they must not land in the next
// turn's table or pending buffer.
func TestAbortRowsOfFinalizedTurnDoNotLeakIntoNextTurn(t *testing.T) {
	log, logs := observed()
	d, _, now := refDuplex(t, log)
	d.BeginTurn(1, "resp-a", 1, 0)
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: stageSnap(5)})
	*now++
	require.True(t, d.finalizeTurn(1, "barge_in"))
	late := stageSnap(7)
	late.FinishReason = duplex.FinishAbort
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: late})
	d.BeginTurn(2, "resp-b", 2, 0)
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 2, Metrics: stageSnap(3)})
	*now++
	require.True(t, d.finalizeTurn(2, "stop"))
	var table string
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "StageRequestStats") && strings.Contains(e.Message, "response=resp-b") {
			table = e.Message
		}
	}
	require.Regexp(t, `stage_gen_time_ms\s+\|\s+3\.000 \|`, table, "only resp-b's own work: %s", table)
}

// An interrupted turn is logged only after every stage that worked for it delivered its partial
// snapshot (TurnEnd), with that work in its table; rows of the next turn that arrive meanwhile
// stay with the next turn.
func TestInterruptedTurnKeepsItsPartialWork(t *testing.T) {
	log, logs := observed()
	d, _, now := refDuplex(t, log)
	d.MarkTurnArrival(1, 100)
	d.MarkInputEnd(1, 150)
	cutTurn := d.BeginTurn(1, "resp-cut", 1, 0)
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: stageSnap(5)})
	*now = 200.5
	d.OnOutput(stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutText, Turn: 1, Text: "hi"}, StageID: 0})
	*now = 201
	d.OnOutput(stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutAudio, Turn: 1, Audio: make([]float32, 10)}, StageID: 1})
	*now = 202
	closed, _ := d.EndTurn(cutTurn, TurnOutcome{Reason: metrics.ReasonCancel, DeliveredMs: 750, UnderrunMs: 120, PlayedMs: 500})
	require.True(t, closed)
	require.Zero(t, summaries(logs), "the turn waits for its stages' partial snapshots")

	// The next utterance starts while the stages wind down: its rows are the next turn's.
	d.MarkTurnArrival(2, 202)
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 2, Metrics: stageSnap(4), StageSubmitTS: 202})
	// The partial snapshots of turn 1 (what the stages did before the abort), then its end.
	cut := metrics.StageRequestStats{NumTokensOut: 15, StageGenTimeMs: 300, FinishReason: duplex.FinishAbort}
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: cut})
	audio := metrics.StageRequestStats{AudioGeneratedFrames: 48000, AudioSampleRate: 24000, AudioDurationS: 2, FinishReason: duplex.FinishAbort}
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 1, Turn: 1, Metrics: audio})
	*now = 203
	d.OnTurnEnd(stage.TurnEnd{Turn: 1, Aborted: true})
	require.Equal(t, 1, summaries(logs, "response=resp-cut", "reason=cancel"))

	var stages, e2e string
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "StageRequestStats") && strings.Contains(e.Message, "response=resp-cut") {
			stages = e.Message
		}
		if strings.Contains(e.Message, "RequestE2EStats") && strings.Contains(e.Message, "response=resp-cut") {
			e2e = e.Message
		}
	}
	require.Regexp(t, `num_tokens_out\s+\|\s+18 \|`, stages, "tokens out include the partial work: %s", stages)
	require.Regexp(t, `audio_generated_frames\s+\|\s+0 \|\s+48,000 \|`, stages, "stage 1's column is there: %s", stages)
	require.Regexp(t, `audio_delivered_s\s+\|\s+0\.750 \|`, e2e, "delivered audio is its own figure: %s", e2e)
	require.Regexp(t, `audio_underrun_s\s+\|\s+0\.120 \|`, e2e, "%s", e2e)
	require.Regexp(t, `audio_played_s\s+\|\s+0\.500 \|`, e2e, "what the client acknowledged as played: %s", e2e)
	require.Regexp(t, `e2e_total_ms\s+\|\s+102,000\.000 \|`, e2e, "t0 100 to the interruption at 202, not to when the stages stopped: %s", e2e)
	require.Regexp(t, `input_end_to_first_text_ms\s+\|\s+50,500\.000 \|`, e2e, "%s", e2e)
	require.Regexp(t, `input_end_to_first_audio_ms\s+\|\s+51,000\.000 \|`, e2e, "%s", e2e)
	require.Regexp(t, `input_ms\s+\|\s+50,000\.000 \|`, e2e, "t0 100 to the input end at 150: %s", e2e)

	d.BeginTurn(2, "resp-next", 2, 0)
	rows := d.turns.openTurn(2).StageRows()
	require.Len(t, rows, 1)
	require.Equal(t, 4.0, rows[0].StageGenTimeMs, "only the next turn's own listen row")
	require.Equal(t, 202.0, d.turns.openTurn(2).Arrival())
	require.Empty(t, d.Unclosed())
}

// An interrupted turn whose response never started (no Respond returned it, no speak decision
// announced it) has no stage work to wait for: it is recorded at once, and its late rows, if
// any, go nowhere.
func TestInterruptedTurnWithoutResponseIsRecordedAtOnce(t *testing.T) {
	log, logs := observed()
	d, _, _ := refDuplex(t, log)
	d.BeginTurn(1, "resp-none", 1, 0)
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: stageSnap(5)})
	require.True(t, d.finalizeTurn(1, metrics.ReasonBargeIn))
	require.Equal(t, 1, summaries(logs, "response=resp-none", "reason=barge_in"))
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: stageSnap(7)})
	d.MarkTurnArrival(2, 0)
	d.BeginTurn(2, "resp-after", 2, 0)
	require.Empty(t, d.turns.openTurn(2).StageRows())
}

// Close finalizes the turns still waiting for their stages once the stream delivered everything.
func TestCloseFlushesInterruptedTurns(t *testing.T) {
	log, logs := observed()
	d, _, _ := refDuplex(t, log)
	d.BeginTurn(1, "resp-closing", 1, 0)
	n, err := d.Respond(context.Background(), NewTurn(1), duplex.ResponseSpec{})
	require.NoError(t, err)
	require.Equal(t, 1, n, "the response runs under the turn's id")
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: stageSnap(5)})
	require.True(t, d.finalizeTurn(1, metrics.ReasonCancel))
	require.Zero(t, summaries(logs))
	require.NoError(t, d.Close(context.Background(), ""))
	require.Equal(t, 1, summaries(logs, "response=resp-closing", "reason=cancel"))
}

// input_audio_buffer.clear abandons the input's turn: its stamp and rows are dropped, and its
// rows still on their way are dropped when they arrive; the next input is a new turn.
func TestClearAbandonsTheInputTurn(t *testing.T) {
	d, _, _ := refDuplex(t, zap.NewNop())
	d.MarkTurnArrival(1, 100)
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: stageSnap(8), StageSubmitTS: 101})
	d.ClearTurnInput(1)
	require.Nil(t, d.turns.openTurn(1), "clear drops the turn with its stamp and rows")
	// A row of an append made before the clear that arrives late is dropped too.
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: stageSnap(8), StageSubmitTS: 102})
	require.Equal(t, 300.0, d.MarkTurnArrival(1, 300), "an abandoned turn is not born again")
	require.Zero(t, d.turns.openCount())
	d.MarkTurnArrival(2, 300)
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 2, Metrics: stageSnap(2), StageSubmitTS: 301})
	d.BeginTurn(2, "resp-clean", 1, 0)
	rows := d.turns.openTurn(2).StageRows()
	require.Len(t, rows, 1)
	require.Equal(t, 2.0, rows[0].StageGenTimeMs)
	require.Equal(t, 300.0, d.turns.openTurn(2).Arrival())
}

// A turn cut by the token limit is logged as length, though the session ends it like a stop.
func TestTruncatedTurnLogsLength(t *testing.T) {
	log, logs := observed()
	d, _, _ := refDuplex(t, log)
	d.BeginTurn(1, "resp-len", 1, 0)
	m := stageSnap(5)
	m.FinishReason = duplex.FinishLength
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: m})
	require.True(t, d.finalizeTurn(1, metrics.ReasonStop))
	require.Equal(t, 1, summaries(logs, "response=resp-len", "reason=length"))
}

// A response cancelled before its engine response started (response.cancel right after
// response.create, its input's commit still queued) keeps the work of the input it answered:
// the listen rows processed after the cancel and the prefill of the committed utterance, up to
// the stages' InputSettled report. Input given after the cancel is the next turn's (the session
// moved to the next id when the response began).
func TestUnstartedTurnWaitsForItsInput(t *testing.T) {
	log, logs := observed()
	d, _, now := refDuplex(t, log)
	d.MarkTurnArrival(1, 100)
	d.MarkInputEnd(1, 150)
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: stageSnap(5), StageSubmitTS: 101})
	d.BeginTurn(1, "resp-unstarted", 1, 0)
	*now = 202
	require.True(t, d.finalizeUnstarted(1, metrics.ReasonCancel))
	require.False(t, d.finalizeTurn(1, metrics.ReasonCancel), "closing twice is a no-op")
	require.Zero(t, summaries(logs), "the turn waits for its input's rows")

	// The input's own appends, processed after the cancel (they were queued behind it).
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: stageSnap(3), StageSubmitTS: 203})
	*now = 205
	require.NoError(t, d.settleInput(context.Background(), 1))
	// The next utterance's append, then the prefill of the committed one.
	d.MarkTurnArrival(2, 206)
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 2, Metrics: stageSnap(4), StageSubmitTS: 206})
	prefill := metrics.StageRequestStats{NumTokensIn: 8, StageGenTimeMs: 2}
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: prefill, StageSubmitTS: 207})
	require.Zero(t, summaries(logs))
	d.OnTurnEnd(stage.TurnEnd{Turn: 1, InputSettled: true})
	require.Equal(t, 1, summaries(logs, "response=resp-unstarted", "reason=cancel"))
	var stages string
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "StageRequestStats") && strings.Contains(e.Message, "response=resp-unstarted") {
			stages = e.Message
		}
	}
	require.Regexp(t, `num_tokens_in\s+\|\s+8 \|`, stages, "%s", stages)
	require.Regexp(t, `stage_gen_time_ms\s+\|\s+10\.000 \|`, stages, "5 + 3 ms of listening and 2 ms of prefill: %s", stages)

	// The next response is turn 2: its rows are its own.
	d.BeginTurn(2, "resp-next", 2, 0)
	d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 2, Metrics: metrics.StageRequestStats{NumTokensIn: 9, NumTokensOut: 4, StageGenTimeMs: 30}})
	rows := d.turns.openTurn(2).StageRows()
	require.Len(t, rows, 1)
	require.Equal(t, 9, rows[0].NumTokensIn)
	require.Equal(t, 34.0, rows[0].StageGenTimeMs, "the next utterance's listen row and its response")
	require.True(t, d.finalizeTurn(2, metrics.ReasonStop))
	require.Equal(t, 1, summaries(logs, "response=resp-next", "reason=stop"))
	require.Equal(t, 1, summaries(logs, "response=resp-unstarted"), "logged exactly once")
	require.Empty(t, d.Unclosed())
}

// Without the stages' report the unstarted turn is still recorded, with its reason, when the
// stream closes: no timer decides.
func TestUnstartedTurnRecordedAtClose(t *testing.T) {
	log, logs := observed()
	d, _, _ := refDuplex(t, log)
	d.MarkTurnArrival(1, 100)
	d.BeginTurn(1, "resp-lost", 1, 0)
	require.True(t, d.finalizeUnstarted(1, metrics.ReasonCancel))
	require.Zero(t, summaries(logs))
	require.NoError(t, d.Close(context.Background(), ""))
	require.Equal(t, 1, summaries(logs, "response=resp-lost", "reason=cancel"))
}
