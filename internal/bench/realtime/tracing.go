package realtime

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/benchreport"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/otlpreceiver"
	"github.com/omniserve/omniserve/internal/tracing"
)

// spanWait bounds how long the bench waits for the traced server's turn spans: the tracer
// exports in batches every second.
const spanWait = 15 * time.Second

// benchTracing measures what tracing costs: the per-chunk ingest allocations of the untraced
// server's request client and of the traced one's (its records feed the tracer), then n paired
// response_required turns on the two, whose configs differ only in the OTLP endpoint; the
// traced one's spans go over OTLP/HTTP to a real receiver on loopback. It fails unless the receiver got a turn span
// for every traced turn: an overhead measured without export would measure nothing.
func benchTracing(ctx context.Context, untraced, traced Target, pcm []byte, n int, prog bench.Progress, out io.Writer) ([]bench.Figure, error) {
	if traced.TurnSpans == nil {
		return nil, fmt.Errorf("the traced server has no OTLP receiver")
	}
	allocsOff, err := turnMetricsAllocsPerChunk(ctx, untraced.Client, "tracing-off")
	if err != nil {
		return nil, err
	}
	allocsOn, err := turnMetricsAllocsPerChunk(ctx, traced.Client, "tracing-on")
	if err != nil {
		return nil, err
	}
	prog.Add(1)
	// The allocation measurement's turn is traced too: its span is counted before the turns.
	if _, err := waitSpans(ctx, traced.TurnSpans, 1); err != nil {
		return nil, err
	}
	before := traced.TurnSpans()
	off, on, err := benchPairedTurns(ctx, untraced.URL, traced.URL, pcm, n, prog)
	if err != nil {
		return nil, err
	}
	want := n + 1 // the warm-up pair's turn is traced too
	got, err := waitSpans(ctx, func() int { return traced.TurnSpans() - before }, want)
	if err != nil {
		return nil, err
	}
	if got < want {
		return nil, fmt.Errorf("the OTLP receiver got %d turn spans for %d traced turns within %s", got, want, spanWait)
	}
	var cost []float64
	for range costRounds {
		us, err := tracerCostPerTurn(ctx, costTurns)
		if err != nil {
			return nil, fmt.Errorf("tracer cost: %w", err)
		}
		cost = append(cost, us)
	}
	prog.Add(1)
	costUs, turnMs := benchreport.Quantile(cost, 50), benchreport.Quantile(off, 50)
	fmt.Fprintf(out, "tracing: allocs/chunk off=%.1f on=%.1f; n=%d per side; turn ms p50 off=%.1f on=%.1f; turn spans received=%d; tracer cost per turn p50=%.1fus (%v)\n",
		allocsOff, allocsOn, len(off), turnMs, benchreport.Quantile(on, 50), got, costUs, cost)
	return []bench.Figure{
		bench.One("tracing_allocs_per_chunk_off", "allocs", "allocations of the per-chunk turn-metrics ingest (as turn_metrics_allocs_per_chunk_off) of the untraced twin server; must be 0", allocsOff, 0),
		bench.One("tracing_allocs_per_chunk_on", "allocs", "the same on the server with tracing on (its finalized records feed the tracer)", allocsOn, 0),
		{Name: "tracing_overhead_pct_on", Unit: "%", Samples: pairOverheadPct(off, on), Keys: []bench.Stat{bench.P50}, Bare: true, Digits: 1,
			Definition: "response_required text turn wall time, traced server (OTLP/HTTP to a receiver on loopback) / its untraced twin − 1, per back-to-back pair"},
		{Name: "tracing_turn_ms_off", Unit: "ms", Samples: off, Definition: "untraced twin server: one response_required text turn in a fresh session, first append → response.done"},
		{Name: "tracing_turn_ms_on", Unit: "ms", Samples: on, Definition: "traced server: the same turn (its session and turn spans exported)"},
		bench.One("tracing_turn_spans", "spans", "realtime.turn spans the loopback OTLP receiver decoded for the traced turns (one per turn, warm-up included)", float64(got), 0),
		{Name: "tracing_cost_us_per_turn", Unit: "us", Samples: cost, Keys: []bench.Stat{bench.P50}, Bare: true, Digits: 1,
			Definition: fmt.Sprintf("wall time per turn of a tracer built as the server builds it, for %d sessions of one turn each (session span, a 3-stage turn record's spans, their OTLP/HTTP export to a receiver of its own on loopback, flushed), one sample per round", costTurns)},
		bench.One("tracing_cost_pct_of_turn", "%", "tracing_cost_us_per_turn / the untraced twin's median turn wall time (tracing_turn_ms_off p50)", costUs/(turnMs*1000)*100, 3),
	}, nil
}

// waitSpans polls count until it reaches want or spanWait passes, and returns the last count.
func waitSpans(ctx context.Context, count func() int, want int) (int, error) {
	got := count()
	for deadline := time.Now().Add(spanWait); got < want && time.Now().Before(deadline); got = count() {
		select {
		case <-ctx.Done():
			return got, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return got, nil
}

// costTurns turns per round of the tracer cost: their spans (9 each) stay below the SDK's
// 2048-span queue, so none is dropped before the flush.
const (
	costTurns  = 200
	costRounds = 5
)

// tracerCostPerTurn builds a tracer as the server does (tracing.New, OTLP/HTTP to a receiver of
// its own on loopback: the traced server's late spans must not be counted) and times what n
// sessions of one turn each cost it: the session span started (as on the upgrade) and ended,
// the turn's closed record turned into spans, and the export of all of them to the receiver,
// which Shutdown flushes. It returns microseconds per turn and fails unless the receiver
// counted n turn spans. The record is shaped like a spoken turn of the pipeline (three stages,
// two transfer edges, input and delivery figures).
func tracerCostPerTurn(ctx context.Context, n int) (float64, error) {
	rcv, err := otlpreceiver.Start(0)
	if err != nil {
		return 0, err
	}
	defer rcv.Close()
	return timeTracer(ctx, rcv.Endpoint(), func() int { return rcv.CountNamed(tracing.TurnSpanName) }, n)
}

func timeTracer(ctx context.Context, endpoint string, turnSpans func() int, n int) (float64, error) {
	tr, err := tracing.New(ctx, tracing.Config{Endpoint: endpoint}, nil)
	if err != nil {
		return 0, err
	}
	if tr == nil {
		return 0, fmt.Errorf("tracing is off (OTEL_SDK_DISABLED?)")
	}
	upgrade, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1/v1/realtime", nil)
	if err != nil {
		return 0, err
	}
	upgrade.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	hook := tr.SessionHook()
	rec := metrics.FinalizedRequest{Duplex: true, FinishedReason: metrics.ReasonStop, AudioTTFPSeconds: 0.3,
		E2E: metrics.RequestE2EStats{E2ETotalMs: 900, E2ETotalTokens: 40, InputMs: 2800, InputEndToFirstAudioMs: 120,
			DeliveryTotalMs: 1800, AudioDeliveredS: 1.4},
		Stages: []metrics.StageRequestStats{
			{StageID: 0, NumTokensIn: 60, NumTokensOut: 12, StageGenTimeMs: 80, FinishReason: metrics.ReasonStop},
			{StageID: 1, NumTokensIn: 12, NumTokensOut: 28, StageGenTimeMs: 300, FinishReason: metrics.ReasonStop},
			{StageID: 2, StageGenTimeMs: 90, FinishReason: metrics.ReasonStop},
		},
		Transfers: []metrics.TransferEdgeStats{{FromStage: 0, ToStage: 1, TxTimeMs: 0.02, SizeBytes: 64}, {FromStage: 1, ToStage: 2, TxTimeMs: 0.05, SizeBytes: 512}},
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("sess_bench_%06d", i)
	}
	before := turnSpans()
	start := time.Now()
	for _, id := range ids {
		_, end := hook(ctx, upgrade, id)
		rec.E2E.RequestID = "resp_" + id // a turn's id contains its session's
		tr.ObserveFinalized(rec)
		end("client_closed", nil)
	}
	if err := tr.Shutdown(ctx); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	if got := turnSpans() - before; got != n {
		return 0, fmt.Errorf("the receiver got %d of %d turn spans", got, n)
	}
	return float64(elapsed.Microseconds()) / float64(n), nil
}
