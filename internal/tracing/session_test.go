package tracing

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/metrics"
)

// newTestTracer is a Tracer exporting synchronously to an in-memory exporter.
func newTestTracer(t *testing.T) (*Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	return &Tracer{tp: tp, tr: tp.Tracer("test"), log: zap.NewNop(), parent: map[string]parentEntry{}}, exp
}

func attrs(kv []attribute.KeyValue) map[string]string {
	out := map[string]string{}
	for _, a := range kv {
		out[string(a.Key)] = a.Value.String()
	}
	return out
}

func TestNilTracerHooksAreNil(t *testing.T) {
	var tr *Tracer
	require.Nil(t, tr.SessionHook())
	require.Nil(t, tr.HTTPHook())
	tr.ObserveFinalized(metrics.FinalizedRequest{})
}

// With tracing off (a nil *Tracer) what the server still calls per turn or request costs no
// allocation: off means no cost, not a cheaper one.
func TestNilTracerAllocatesNothing(t *testing.T) {
	var tr *Tracer
	rec := metrics.FinalizedRequest{Duplex: true, FinishedReason: metrics.ReasonStop}
	rec.E2E.RequestID = "resp-1"
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		tr.Begin(ctx, "sess-1")
		tr.ObserveFinalized(rec)
		tr.End("sess-1")
	})
	require.Zero(t, allocs)
}

// TestSessionSpanParentsItsTurns: the session span continues the upgrade's traceparent; each
// turn's span is its child and is exported when the turn ends, before the session closes; the
// tracing field names and tags the session span at close.
func TestSessionSpanParentsItsTurns(t *testing.T) {
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	tests := []struct {
		name     string
		tracing  any
		wantName string
		want     map[string]string
	}{
		{"workflow", map[string]any{"workflow_name": "support-bot", "group_id": "g1", "metadata": map[string]any{"user": "u7", "tier": 2.0}},
			"support-bot", map[string]string{"omniserve.workflow_name": "support-bot", "omniserve.group_id": "g1", "omniserve.metadata.user": "u7", "omniserve.metadata.tier": "2"}},
		{"auto", "auto", SessionSpanName, map[string]string{"omniserve.tracing": "auto"}},
		{"none", nil, SessionSpanName, map[string]string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, exp := newTestTracer(t)
			r, err := http.NewRequest(http.MethodGet, "http://x/v1/realtime", nil)
			require.NoError(t, err)
			r.Header.Set("traceparent", "00-"+traceID+"-b7ad6b7169203331-01")
			ctx, end := tr.SessionHook()(context.Background(), r, "sess_abc")
			require.Equal(t, traceID, trace.SpanContextFromContext(ctx).TraceID().String(), "the session runs under its span")

			for i, reason := range []string{metrics.ReasonStop, metrics.ReasonBargeIn} {
				tr.ObserveFinalized(metrics.FinalizedRequest{Duplex: true, FinishedReason: reason, Dialect: []string{"", "vllm_duplex"}[i],
					E2E:    metrics.RequestE2EStats{RequestID: "sess_abc-resp" + string(rune('0'+i)), E2ETotalMs: 20},
					Stages: []metrics.StageRequestStats{{StageID: 0, StageGenTimeMs: 5}}})
			}
			turns := exp.GetSpans()
			require.Len(t, turns, 4, "turn and stage spans are exported as each turn ends")
			end("client_close", tc.tracing)
			spans := exp.GetSpans()
			require.Len(t, spans, 5)
			sess := spans[4]
			require.Equal(t, tc.wantName, sess.Name)
			require.Equal(t, traceID, sess.SpanContext.TraceID().String())
			require.Equal(t, "b7ad6b7169203331", sess.Parent.SpanID().String(), "continues the upgrade's traceparent")
			got := attrs(sess.Attributes)
			require.Equal(t, "client_close", got["omniserve.close_reason"])
			require.Equal(t, "sess_abc", got["omniserve.session_id"])
			for k, v := range tc.want {
				require.Equal(t, v, got[k], k)
			}
			var turnSpans []tracetest.SpanStub
			for _, s := range spans {
				if s.Name == "realtime.turn" {
					turnSpans = append(turnSpans, s)
				}
			}
			require.Len(t, turnSpans, 2)
			for _, s := range turnSpans {
				require.Equal(t, sess.SpanContext.SpanID(), s.Parent.SpanID(), "a turn is the session span's child")
				require.Equal(t, traceID, s.SpanContext.TraceID().String())
			}
			require.Empty(t, turnSpans[0].Events, "a done turn is not marked")
			require.Equal(t, "barge_in", attrs(turnSpans[1].Attributes)["omniserve.finished_reason"])
			require.Equal(t, "openai", attrs(turnSpans[0].Attributes)["omniserve.dialect"], "a turn of no named dialect is OpenAI's")
			require.Equal(t, "vllm_duplex", attrs(turnSpans[1].Attributes)["omniserve.dialect"])
			require.Equal(t, "true", attrs(turnSpans[1].Attributes)["omniserve.interrupted"])
			require.Len(t, turnSpans[1].Events, 1)
			require.Equal(t, "interrupted", turnSpans[1].Events[0].Name)

			// The last turn's record may close just after the session: it still joins the trace.
			tr.ObserveFinalized(metrics.FinalizedRequest{Duplex: true, FinishedReason: metrics.ReasonClose,
				E2E: metrics.RequestE2EStats{RequestID: "sess_abc-resp9", E2ETotalMs: 1}})
			late := exp.GetSpans()[5]
			require.Equal(t, sess.SpanContext.SpanID(), late.Parent.SpanID())
		})
	}
}

// TestSessionWithoutTraceparentStartsATrace: no traceparent, a fresh trace rooted at the
// session span, which still parents the turns.
func TestSessionWithoutTraceparentStartsATrace(t *testing.T) {
	tr, exp := newTestTracer(t)
	r, err := http.NewRequest(http.MethodPost, "http://x/v1/realtime/calls", nil)
	require.NoError(t, err)
	_, end := tr.SessionHook()(context.Background(), r, "sess_q")
	tr.ObserveFinalized(metrics.FinalizedRequest{Duplex: true, FinishedReason: metrics.ReasonCancel, E2E: metrics.RequestE2EStats{RequestID: "sess_q-r1", E2ETotalMs: 3}})
	end("hangup", nil)
	spans := exp.GetSpans()
	require.Len(t, spans, 2)
	require.False(t, spans[1].Parent.IsValid(), "the session span is the root")
	require.Equal(t, spans[1].SpanContext.TraceID(), spans[0].SpanContext.TraceID())
	require.Equal(t, spans[1].SpanContext.SpanID(), spans[0].Parent.SpanID())
	require.Equal(t, trace.SpanKindServer, spans[1].SpanKind)
}

// ObserveFinalized returns the trace id of the span it exported (the record's Prometheus
// exemplar), and "" when the sampler dropped the span: an exemplar must lead to a trace.
func TestObserveFinalizedReturnsTheExportedTraceID(t *testing.T) {
	rec := metrics.FinalizedRequest{Duplex: true, FinishedReason: metrics.ReasonStop}
	rec.E2E.RequestID = "resp-7"
	rec.E2E.E2ETotalMs = 120

	tr, exp := newTestTracer(t)
	id := tr.ObserveFinalized(rec)
	spans := exp.GetSpans()
	require.Len(t, spans, 1)
	require.Equal(t, spans[0].SpanContext.TraceID().String(), id)

	never := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(never), sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	unsampled := &Tracer{tp: tp, tr: tp.Tracer("test"), log: zap.NewNop(), parent: map[string]parentEntry{}}
	require.Empty(t, unsampled.ObserveFinalized(rec))
	require.Empty(t, never.GetSpans())
}

// A turn's input and output.audio children sit on its timeline where the record puts them: the
// turn starts at t0; input lasts input_ms from t0; output.audio runs from the first audio
// packet (audio TTFP after t0) to the delivery end (delivery_total_ms after t0). A turn without
// those figures (or a chat request) gets neither.
func TestTurnInputAndOutputSpans(t *testing.T) {
	tests := []struct {
		name                  string
		inputMs, ttfpS, delMs float64
		want                  map[string][2]float64 // span → start, end in ms after t0
	}{
		{"spoken and played", 800, 1.2, 2500, map[string][2]float64{InputSpanName: {0, 800}, OutputSpanName: {1200, 2500}}},
		{"text only", 300, 0, 0, map[string][2]float64{InputSpanName: {0, 300}}},
		{"committed without appends", 0, 0.4, 900, map[string][2]float64{OutputSpanName: {400, 900}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, exp := newTestTracer(t)
			rec := metrics.FinalizedRequest{Duplex: true, FinishedReason: metrics.ReasonStop, AudioTTFPSeconds: tc.ttfpS}
			rec.E2E.RequestID = "resp-9"
			rec.E2E.E2ETotalMs = 1500
			rec.E2E.InputMs, rec.E2E.DeliveryTotalMs = tc.inputMs, tc.delMs
			tr.ObserveFinalized(rec)
			var t0 time.Time
			got := map[string][2]float64{}
			spans := exp.GetSpans()
			for _, s := range spans {
				if s.Name == TurnSpanName {
					t0 = s.StartTime
					require.InDelta(t, max(1500, tc.delMs), float64(s.EndTime.Sub(s.StartTime).Microseconds())/1000, 0.001)
				}
			}
			for _, s := range spans {
				if s.Name == InputSpanName || s.Name == OutputSpanName {
					require.Equal(t, spans[len(spans)-1].SpanContext.SpanID(), s.Parent.SpanID(), "a child of the turn")
					got[s.Name] = [2]float64{float64(s.StartTime.Sub(t0).Microseconds()) / 1000, float64(s.EndTime.Sub(t0).Microseconds()) / 1000}
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
}
