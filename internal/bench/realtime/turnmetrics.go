package realtime

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/benchreport"
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/requestclient"
	"github.com/omniserve/omniserve/internal/stage"
)

// turnMetricsAllocsPerChunk opens a real duplex stream on rc and measures, like
// testing.AllocsPerRun, the allocations of the per-chunk ingest path the pipeline drives for
// every 100 ms audio unit: the unit's stage-0 snapshot, its listen decision, a text output with
// metrics attached, and the session's arrival stamp. With LogStats off it must be 0: the
// reference still built aggregators and copied every snapshot when its stats were off.
func turnMetricsAllocsPerChunk(ctx context.Context, rc *requestclient.Client, name string) (float64, error) {
	d, err := rc.OpenDuplex(ctx, requestclient.Fence{SessionID: "bench-allocs-" + name}, duplex.Options{}, func(duplex.Output) {})
	if err != nil {
		return 0, err
	}
	defer d.Close(ctx, "")
	snap := stage.StageMetricsMessage{RequestID: d.Stage0ID(), StageID: 0, StageSubmitTS: metrics.Now(), FinalOutputType: "audio",
		Metrics: metrics.StageRequestStats{StageGenTimeMs: 1.5, OutputUnitType: "text"}}
	listen := stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutDecision, Decision: duplex.DecisionListen}, RequestID: d.Stage0ID(), StageID: 0}
	textMetrics := metrics.StageRequestStats{NumTokensOut: 1, StageGenTimeMs: 2}
	text := stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutText, Text: "hi"}, RequestID: d.Stage0ID(), StageID: 0, Metrics: &textMetrics}
	t := d.BeginTurn(1, "resp-bench-allocs", 1, 0)
	defer d.EndTurn(t, requestclient.TurnOutcome{Reason: metrics.ReasonStop, PlayedMs: -1})
	return testing.AllocsPerRun(2000, func() {
		d.MarkTurnArrival(1, 0)
		d.OnStageMetrics(snap)
		d.OnOutput(listen)
		d.OnOutput(text)
	}), nil
}

// benchPairedTurns runs the same response_required text turns (2.8 s of speech appended
// faster than real time, commit with response_create, wait for response.done), each in a fresh
// session, alternately on a server without (urlOff) and one with (urlOn) the feature measured
// (--log-stats, tracing), and returns the per-turn wall times of each. Interleaving spreads the
// other jobs' load over both sides.
func benchPairedTurns(ctx context.Context, urlOff, urlOn string, pcm []byte, n int, prog bench.Progress) (off, on []float64, err error) {
	turn := func(url string) (float64, error) {
		c, err := dial(ctx, url+"?duplex=1")
		if err != nil {
			return 0, err
		}
		defer c.ws.CloseNow()
		if err := c.open(map[string]any{"turn_detection": nil, "modalities": []string{"text"}, "max_response_output_tokens": 8}); err != nil {
			return 0, err
		}
		start := time.Now()
		for i := 0; i < len(pcm); i += 3200 {
			if err := c.send(appendEv(pcm[i:min(i+3200, len(pcm))])); err != nil {
				return 0, err
			}
		}
		if err := c.send(map[string]any{"type": "input_audio_buffer.commit", "response_create": true}); err != nil {
			return 0, err
		}
		if _, err := c.until("response.done", 30*time.Second); err != nil {
			return 0, err
		}
		return float64(time.Since(start).Microseconds()) / 1000, nil
	}
	for i := range n + 1 {
		first, second := urlOff, urlOn
		if i%2 == 1 {
			first, second = urlOn, urlOff // alternate the order too
		}
		a, err := turn(first)
		if err != nil {
			return nil, nil, err
		}
		b, err := turn(second)
		if err != nil {
			return nil, nil, err
		}
		prog.Add(1)
		if i == 0 {
			continue // warm-up
		}
		if first == urlOff {
			off, on = append(off, a), append(on, b)
		} else {
			on, off = append(on, a), append(off, b)
		}
	}
	return off, on, nil
}

// pairOverheadPct is on/off − 1 in percent for each back-to-back pair (positive: the feature is
// slower). Each pair ran back to back, so slow drift of the shared machine cancels within a
// pair, and the figure's p50 ignores the odd turn a background job stretched; with summed times
// one such turn decided the figure (2.0 % and 7.0 % in two runs of the same code).
func pairOverheadPct(off, on []float64) []float64 {
	n := min(len(off), len(on))
	ratios := make([]float64, 0, n)
	for i := range n {
		if off[i] > 0 {
			ratios = append(ratios, (on[i]/off[i]-1)*100)
		}
	}
	return ratios
}

func turnMetricsFigures(allocsOff, allocsOn float64, off, on []float64, out io.Writer) []bench.Figure {
	fmt.Fprintf(out, "turn metrics ingest: allocs/chunk off=%.1f on=%.1f\n", allocsOff, allocsOn)
	fmt.Fprintf(out, "log-stats overhead: n=%d per side; turn ms p50 off=%.1f on=%.1f; sum off=%.0f on=%.0f\n",
		len(off), benchreport.Quantile(off, 50), benchreport.Quantile(on, 50), sum(off), sum(on))
	return []bench.Figure{
		bench.One("turn_metrics_allocs_per_chunk_off", "allocs", "allocations of the per-chunk turn-metrics ingest with --log-stats off (testing.AllocsPerRun over 2000 chunks); must be 0", allocsOff, 0),
		bench.One("turn_metrics_allocs_per_chunk_on", "allocs", "the same with --log-stats on", allocsOn, 0),
		{Name: "turn_metrics_overhead_pct_on", Unit: "%", Samples: pairOverheadPct(off, on), Keys: []bench.Stat{bench.P50}, Bare: true, Digits: 1,
			Definition: "response_required text turn wall time, --log-stats server / plain server − 1, per back-to-back pair"},
		{Name: "logstats_turn_ms_off", Unit: "ms", Samples: off, Definition: "plain server: one response_required text turn, first append → response.done"},
		{Name: "logstats_turn_ms_on", Unit: "ms", Samples: on, Definition: "--log-stats server: the same turn"},
	}
}

// statsHeapGrowthPerSessionHour opens a real duplex stream on rc (--log-stats on) and drives its
// statistics ingest with one session-hour of 100 ms units (36,000; a spoken turn every 50 units,
// every fifth one cut short), the way the pipeline does, and returns the heap growth in KiB
// between the end of a ten-minute warm-up and the end of the hour. The stream's real engine
// work is not run: only the statistics state is measured.
func statsHeapGrowthPerSessionHour(ctx context.Context, rc *requestclient.Client) (float64, error) {
	d, err := rc.OpenDuplex(ctx, requestclient.Fence{SessionID: "bench-heap"}, duplex.Options{}, func(duplex.Output) {})
	if err != nil {
		return 0, err
	}
	defer d.Close(ctx, "")
	const hour = 36000
	next := feedStatsSession(d, hour/6, 1)
	before := heapAlloc()
	feedStatsSession(d, hour, next)
	after := heapAlloc()
	return (float64(after) - float64(before)) / 1024, nil
}

func feedStatsSession(d *requestclient.DuplexRequest, chunks, turn int) int {
	listen := metrics.StageRequestStats{StageGenTimeMs: 1.5, OutputUnitType: "text"}
	thinker := metrics.StageRequestStats{NumTokensIn: 12, NumTokensOut: 8, StageGenTimeMs: 40, VllmTtftMs: 9,
		VllmTpotMs: 4, VllmItlsMs: []float64{4, 4, 4}, OutputUnitType: "text", FinishReason: duplex.FinishStop}
	talker := metrics.StageRequestStats{AudioGeneratedFrames: 24000, AudioSampleRate: 24000, AudioDurationS: 1,
		StageGenTimeMs: 30, InterOutputLatenciesMs: []float64{5}, OutputUnitType: "audio", FinishReason: duplex.FinishStop}
	rid := d.Stage0ID()
	for i := range chunks {
		if i%50 == 10 {
			d.MarkTurnArrival(turn, 0)
		}
		d.OnStageMetrics(stage.StageMetricsMessage{RequestID: rid, StageID: 0, Turn: turn, Metrics: listen, StageSubmitTS: metrics.Now()})
		d.OnOutput(stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutDecision, Turn: turn, Decision: duplex.DecisionListen}, RequestID: rid, StageID: 0})
		if i%50 != 49 {
			continue
		}
		d.MarkInputEnd(turn, 0)
		t := d.BeginTurn(turn, fmt.Sprintf("resp-bench-%d", turn), turn, 0)
		d.OnOutput(stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutDecision, Turn: turn, Decision: duplex.DecisionSpeak}, RequestID: rid, StageID: 0})
		d.OnOutput(stage.OutputMessage{Output: duplex.Output{Kind: duplex.OutText, Turn: turn, Text: "hello"}, RequestID: rid, StageID: 0})
		d.OnTransfer(stage.TransferEvent{From: 0, To: 1, RequestID: rid, Turn: turn, SizeBytes: 6, TxMs: 0.01})
		cut := turn%5 == 0
		if cut {
			d.EndTurn(t, requestclient.TurnOutcome{Reason: metrics.ReasonCancel, DeliveredMs: 300, PlayedMs: -1})
		}
		d.OnStageMetrics(stage.StageMetricsMessage{RequestID: rid, StageID: 0, Turn: turn, Metrics: thinker})
		d.OnStageMetrics(stage.StageMetricsMessage{RequestID: rid, StageID: 1, Turn: turn, Metrics: talker})
		d.OnTurnEnd(stage.TurnEnd{RequestID: rid, Turn: turn, Aborted: cut})
		if !cut {
			d.EndTurn(t, requestclient.TurnOutcome{Reason: metrics.ReasonStop, DeliveredMs: 1000, PlayedMs: -1})
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

func sum(xs []float64) float64 {
	var s float64
	for _, v := range xs {
		s += v
	}
	return s
}
