package realtime

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/omniserve/omniserve/internal/bench"
	"github.com/omniserve/omniserve/internal/benchreport"
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
	before := traced.TurnSpans()
	off, on, err := benchPairedTurns(ctx, untraced.URL, traced.URL, pcm, n, prog)
	if err != nil {
		return nil, err
	}
	want := n + 1 // the warm-up pair's turn is traced too
	got := traced.TurnSpans() - before
	for deadline := time.Now().Add(spanWait); got < want && time.Now().Before(deadline); got = traced.TurnSpans() - before {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if got < want {
		return nil, fmt.Errorf("the OTLP receiver got %d turn spans for %d traced turns within %s", got, want, spanWait)
	}
	fmt.Fprintf(out, "tracing: allocs/chunk off=%.1f on=%.1f; n=%d per side; turn ms p50 off=%.1f on=%.1f; turn spans received=%d\n",
		allocsOff, allocsOn, len(off), benchreport.Quantile(off, 50), benchreport.Quantile(on, 50), got)
	return []bench.Figure{
		bench.One("tracing_allocs_per_chunk_off", "allocs", "allocations of the per-chunk turn-metrics ingest (as turn_metrics_allocs_per_chunk_off) of the untraced twin server; must be 0", allocsOff, 0),
		bench.One("tracing_allocs_per_chunk_on", "allocs", "the same on the server with tracing on (its finalized records feed the tracer)", allocsOn, 0),
		{Name: "tracing_overhead_pct_on", Unit: "%", Samples: pairOverheadPct(off, on), Keys: []bench.Stat{bench.P50}, Bare: true, Digits: 1,
			Definition: "response_required text turn wall time, traced server (OTLP/HTTP to a receiver on loopback) / its untraced twin − 1, per back-to-back pair"},
		{Name: "tracing_turn_ms_off", Unit: "ms", Samples: off, Definition: "untraced twin server: one response_required text turn in a fresh session, first append → response.done"},
		{Name: "tracing_turn_ms_on", Unit: "ms", Samples: on, Definition: "traced server: the same turn (its session and turn spans exported)"},
		bench.One("tracing_turn_spans", "spans", "realtime.turn spans the loopback OTLP receiver decoded for the traced turns (one per turn, warm-up included)", float64(got), 0),
	}, nil
}
