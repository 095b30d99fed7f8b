package requestclient

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/stage"
)

// sessionHourChunks is one hour of 100 ms audio units.
const sessionHourChunks = 36000

// feedSession drives a DuplexRequest the way the pipeline does for chunks audio units: every unit's
// listen snapshot and decision, and every 50 units a spoken turn with text, a transfer, both
// stages' snapshots and its end; every fifth turn is interrupted (cancel) instead of finishing.
func feedSession(d *DuplexRequest, chunks, turn int) int {
	listen := metrics.StageRequestStats{StageGenTimeMs: 1.5, OutputUnitType: "text"}
	thinker := metrics.StageRequestStats{NumTokensIn: 12, NumTokensOut: 8, StageGenTimeMs: 40,
		VllmTtftMs: 9, VllmTpotMs: 4, VllmItlsMs: []float64{4, 4, 4}, OutputUnitType: "text", FinishReason: duplex.FinishStop}
	talker := metrics.StageRequestStats{AudioGeneratedFrames: 24000, AudioSampleRate: 24000, AudioDurationS: 1,
		StageGenTimeMs: 30, InterOutputLatenciesMs: []float64{5}, OutputUnitType: "audio", FinishReason: duplex.FinishStop}
	for i := range chunks {
		if i%50 == 10 {
			d.MarkTurnArrival(turn, 0)
		}
		d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: turn, Metrics: listen, StageSubmitTS: metrics.Now()})
		d.OnOutput(stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutDecision, Turn: turn, Decision: duplex.DecisionListen}, StageID: 0})
		if i%50 != 49 {
			continue
		}
		d.MarkInputEnd(turn, 0)
		h := d.BeginTurn(turn, fmt.Sprintf("resp-%d", turn), turn, 0)
		d.OnOutput(stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutDecision, Turn: turn, Decision: duplex.DecisionSpeak}, StageID: 0})
		d.OnOutput(stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutText, Turn: turn, Text: "hello"}, StageID: 0})
		d.OnTransfer(stage.TransferEvent{From: 0, To: 1, Turn: turn, SizeBytes: 6, TxMs: 0.01})
		d.OnOutput(stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutAudio, Turn: turn}, StageID: 1})
		cancel := turn%5 == 0
		if cancel {
			d.EndTurn(h, TurnOutcome{Reason: metrics.ReasonCancel, DeliveredMs: 300, PlayedMs: -1})
		}
		d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: turn, Metrics: thinker})
		d.OnStageMetrics(stage.StageMetricsMessage{StageID: 1, Turn: turn, Metrics: talker})
		d.OnTurnEnd(stage.TurnEnd{Turn: turn, Aborted: cancel})
		if !cancel {
			d.EndTurn(h, TurnOutcome{Reason: metrics.ReasonStop, DeliveredMs: 1000, PlayedMs: -1})
		}
		turn++
	}
	return turn
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// A one-hour-equivalent session (36,000 units, 720 turns, a fifth of them interrupted) keeps
// the statistics state flat: the heap after the hour is within 64 KiB of the heap after the
// first ten minutes (the target; the per-chunk aggregator grew 12 MiB per hour).
func TestStatsMemoryFlatOverSessionHour(t *testing.T) {
	// The outputs go nowhere: the session's own queue is not statistics state.
	d := New(nil, Options{LogStats: true}, zap.NewNop()).newDuplex(Fence{SessionID: "duplex-hour"}, "", 2, func(duplex.Output) {})
	d.start(&fakeStream{t: t})
	next := feedSession(d, sessionHourChunks/6, 1) // warm-up: every pool, map and buffer at its size
	before := heapAlloc()
	feedSession(d, sessionHourChunks, next)
	after := heapAlloc()
	growthKiB := (float64(after) - float64(before)) / 1024
	t.Logf("stats heap growth over a session hour: %.1f KiB", growthKiB)
	require.LessOrEqual(t, growthKiB, 64.0)
	require.Zero(t, d.turns.openCount(), "every turn of the hour was recorded")
	require.NoError(t, d.Close(context.Background(), ""))
}

// With --log-stats off but Prometheus on (the server's default), duplex turns are kept for the
// metrics; the per-chunk path (a listen row, its decision, the arrival stamp) still allocates
// nothing, with tracing off (no OnFinalized) and on (the tracer is called once per finalized
// turn, never per chunk).
func TestDuplexPrometheusOnlyPerChunkAllocatesNothing(t *testing.T) {
	tests := []struct {
		name    string
		tracing bool
	}{
		{"tracing off", false},
		{"tracing on", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			col := metrics.NewCollectors(prometheus.NewRegistry(), "m")
			var finalized []string
			opts := Options{Collectors: col}
			if tc.tracing {
				opts.OnFinalized = func(r metrics.FinalizedRequest) string {
					finalized = append(finalized, r.FinishedReason)
					return ""
				}
			}
			d := New(nil, opts, zap.NewNop()).newDuplex(Fence{SessionID: "duplex-prom"}, "", 2, func(duplex.Output) {})
			d.start(&fakeStream{t: t})
			require.NotNil(t, d.turns, "turns are kept for Prometheus")
			listen := stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: metrics.StageRequestStats{StageGenTimeMs: 1.5, OutputUnitType: "text"}, StageSubmitTS: 1}
			decision := stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutDecision, Turn: 1, Decision: duplex.DecisionListen}, StageID: 0}
			d.MarkTurnArrival(1, 1)
			d.OnStageMetrics(listen) // the first row of a stage sizes its merge state
			h := d.BeginTurn(1, "resp-prom", 1, 1)
			allocs := testing.AllocsPerRun(1000, func() {
				d.MarkTurnArrival(1, 0)
				d.OnStageMetrics(listen)
				d.OnOutput(decision)
			})
			require.Zero(t, allocs)
			require.Empty(t, finalized, "nothing reaches the tracer per chunk")
			closed, _ := d.EndTurn(h, TurnOutcome{Reason: metrics.ReasonStop, DeliveredMs: 100, PlayedMs: -1})
			require.True(t, closed)
			if tc.tracing {
				require.Equal(t, []string{metrics.ReasonStop}, finalized, "the finalized turn reaches the tracer once")
			}
			require.NoError(t, d.Close(context.Background(), ""))
		})
	}
}

// The stream's dialect reaches its turns' one record: the tracer and Prometheus see it.
func TestDuplexTurnCarriesDialect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ given, want string }{{"live", "live"}, {"vllm_duplex", "vllm_duplex"}, {"", "openai"}} {
		t.Run(tc.want, func(t *testing.T) {
			t.Parallel()
			col := metrics.NewCollectors(prometheus.NewRegistry(), "m")
			var got []string
			opts := Options{Collectors: col, OnFinalized: func(r metrics.FinalizedRequest) string {
				got = append(got, r.Dialect)
				return ""
			}}
			d := New(nil, opts, zap.NewNop()).newDuplex(Fence{SessionID: "duplex-dialect"}, tc.given, 2, func(duplex.Output) {})
			d.start(&fakeStream{t: t})
			d.MarkTurnArrival(1, 1)
			d.OnStageMetrics(stage.StageMetricsMessage{StageID: 0, Turn: 1, Metrics: metrics.StageRequestStats{StageGenTimeMs: 1.5, OutputUnitType: "text"}, StageSubmitTS: 1})
			h := d.BeginTurn(1, "resp-dialect", 1, 1)
			closed, _ := d.EndTurn(h, TurnOutcome{Reason: metrics.ReasonStop, DeliveredMs: 100, PlayedMs: -1})
			require.True(t, closed)
			require.Equal(t, []string{tc.want}, got)
			require.NoError(t, d.Close(context.Background(), ""))
		})
	}
}
