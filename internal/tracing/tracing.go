// Package tracing exports per-turn and per-request traces with OpenTelemetry. Spans are built
// from the closed record of a turn or chat request (metrics.FinalizedRequest), the record the
// --log-stats tables and Prometheus read, so a span's duration is its table figure.
//
// It is configured the standard way (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf or grpc,
// OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER and _ARG, OTEL_SDK_DISABLED) or by the config key
// tracing.otlp_endpoint. Without an endpoint it is off: a nil *Tracer, which does nothing and
// costs nothing. Spans are exported in batches in the background, so an unreachable collector
// never slows a turn.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/metrics"
)

// The span names of the closed records: a realtime turn and a chat request.
const (
	TurnSpanName = "realtime.turn"
	ChatSpanName = "chat.completion"
	// A turn's children placed on its timeline: the user's input and the audio's delivery.
	InputSpanName  = "input"
	OutputSpanName = "output.audio"
	// A turn's tool calls: "mcp.call <tool>" (the server called an MCP tool) and
	// "tool.call <function>" (the client ran a function tool).
	MCPCallSpanPrefix  = "mcp.call "
	ToolCallSpanPrefix = "tool.call "
)

// Config is the server's own tracing configuration; the OTEL_* environment applies on top.
type Config struct {
	// Endpoint is an OTLP endpoint URL (tracing.otlp_endpoint); "" = the OTEL_* environment's.
	Endpoint string
	// Version is the service.version resource attribute.
	Version string
}

// Tracer turns closed records into spans. A nil *Tracer does nothing.
type Tracer struct {
	tp     *sdktrace.TracerProvider
	tr     trace.Tracer
	log    *zap.Logger
	mu     sync.Mutex
	parent map[string]parentEntry // request or session id -> the caller's trace context
}

type parentEntry struct {
	sc    trace.SpanContext
	until time.Time
}

// parentTTL bounds how long a caller's trace context is kept for records not yet finalized
// (a chat request's record may close after its handler returned).
const parentTTL = 10 * time.Minute

// New returns the tracer configured by cfg and the environment, or nil when tracing is off.
func New(ctx context.Context, cfg Config, log *zap.Logger) (*Tracer, error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	endpoint := cfg.Endpoint
	if endpoint == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	protocol := firstEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	var exp sdktrace.SpanExporter
	var err error
	switch protocol {
	case "", "http/protobuf":
		var opts []otlptracehttp.Option
		if endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimRight(endpoint, "/")+"/v1/traces"))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	case "grpc":
		var opts []otlptracegrpc.Option
		if endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL %q is not supported (http/protobuf or grpc)", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	name := os.Getenv("OTEL_SERVICE_NAME")
	if name == "" {
		name = "omniserve"
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(name), semconv.ServiceVersion(cfg.Version)))
	if err != nil {
		res = resource.Default()
	}
	// The sampler comes from OTEL_TRACES_SAMPLER / _ARG (parent-based always-on by default).
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)), sdktrace.WithResource(res))
	if log == nil {
		log = zap.NewNop()
	}
	log.Info("tracing on: spans export over OTLP", zap.String("protocol", firstNonEmpty(protocol, "http/protobuf")), zap.String("service", name))
	return &Tracer{tp: tp, tr: tp.Tracer("github.com/omniserve/omniserve"), log: log, parent: map[string]parentEntry{}}, nil
}

// FlushTimeout bounds Shutdown's flush. The exporter's own bounds (a 10 s timeout per export,
// retries for up to a minute) would let a collector that accepts connections and never answers
// hold the server's whole shutdown deadline, and the engine, closed after tracing, would never
// be closed. Spans still queued past it are dropped, as they are when the collector is down.
const FlushTimeout = 2 * time.Second

// Shutdown flushes the spans still queued and stops the exporter, within FlushTimeout.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, FlushTimeout)
	defer cancel()
	if err := t.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flushing spans: %w", err)
	}
	return nil
}

// Extract reads a W3C traceparent (and tracestate) from HTTP-style headers.
func Extract(ctx context.Context, h propagation.TextMapCarrier) context.Context {
	return propagation.TraceContext{}.Extract(ctx, h)
}

// Inject writes ctx's trace context into outgoing headers (remote stages join the trace).
func Inject(ctx context.Context, h propagation.TextMapCarrier) {
	propagation.TraceContext{}.Inject(ctx, h)
}

// Begin registers the caller's trace context for the records of id (a chat request id, or a
// realtime session id, which the ids of its turns contain) until End, or at most parentTTL.
// Without a valid span context in ctx the records start their own traces.
func (t *Tracer) Begin(ctx context.Context, id string) {
	if t == nil {
		return
	}
	t.begin(ctx, id, parentTTL)
}

func (t *Tracer) begin(ctx context.Context, id string, ttl time.Duration) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.parent) >= 1024 {
		for k, e := range t.parent {
			if now.After(e.until) {
				delete(t.parent, k)
			}
		}
	}
	t.parent[id] = parentEntry{sc: sc, until: now.Add(ttl)}
}

// End forgets id's trace context.
func (t *Tracer) End(id string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	delete(t.parent, id)
	t.mu.Unlock()
}

func (t *Tracer) parentOf(requestID string) (trace.SpanContext, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.parent[requestID]; ok {
		return e.sc, true
	}
	for id, e := range t.parent {
		if strings.Contains(requestID, id) {
			return e.sc, true
		}
	}
	return trace.SpanContext{}, false
}

// ObserveFinalized exports a closed record as a span tree: the request or turn, ended now and
// as long as its e2e figure (so it starts at the record's t0), with a child per stage (its
// stage_gen_time_ms, ending with the parent) and per transfer edge (tx_time_ms); a turn also
// gets an input child (t0 → input end: input_ms), an output.audio child (first audio
// packet → delivery end: delivery_total_ms) and a child per tool call (its ToolCallStats
// figure, from its start), placed where the record puts them; a call that ends later
// stretches the turn span to its end. It implements the observer the request client
// calls with every record it finalizes, and returns the trace id (hex) when the span was
// sampled, "" otherwise: the record's Prometheus exemplar.
func (t *Tracer) ObserveFinalized(rec metrics.FinalizedRequest) string {
	if t == nil {
		return ""
	}
	end := time.Now()
	total := rec.E2E.E2ETotalMs
	if rec.E2E.DeliveryTotalMs > total {
		total = rec.E2E.DeliveryTotalMs
	}
	// A tool call may end after the turn's other figures (an MCP call the response waited for
	// while its text was long done): the turn span then ends with it, so it holds its children.
	spanTotal := total
	for _, c := range rec.ToolCalls {
		spanTotal = max(spanTotal, c.StartMs+max(c.DurationMs, 0))
	}
	start := end.Add(-ms(spanTotal))
	end = start.Add(ms(total)) // where the stage and transfer spans end, as without calls
	spanEnd := start.Add(ms(spanTotal))
	ctx := context.Background()
	if sc, ok := t.parentOf(rec.E2E.RequestID); ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	name := ChatSpanName
	if rec.Duplex {
		name = TurnSpanName
	}
	ctx, span := t.tr.Start(ctx, name, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("omniserve.request_id", rec.E2E.RequestID),
			attribute.String("omniserve.finished_reason", rec.FinishedReason),
			attribute.Float64("omniserve.e2e_total_ms", rec.E2E.E2ETotalMs),
			attribute.Int64("omniserve.e2e_total_tokens", rec.E2E.E2ETotalTokens),
		))
	if rec.E2E.InputEndToFirstAudioMs > 0 {
		span.SetAttributes(attribute.Float64("omniserve.input_end_to_first_audio_ms", rec.E2E.InputEndToFirstAudioMs))
	}
	if rec.Duplex {
		span.SetAttributes(attribute.String("omniserve.dialect", metrics.NormalizeDialect(rec.Dialect)))
	}
	switch rec.FinishedReason {
	case metrics.ReasonBargeIn, metrics.ReasonCancel, metrics.ReasonClose, metrics.ReasonAbort:
		// Marked twice: an attribute to filter on, an event that trace viewers show on the
		// timeline (the turn was cut short, not failed: the status stays unset).
		span.SetAttributes(attribute.Bool("omniserve.interrupted", true))
		span.AddEvent("interrupted", trace.WithTimestamp(spanEnd), trace.WithAttributes(attribute.String("omniserve.finished_reason", rec.FinishedReason)))
	case metrics.ReasonError:
		span.SetStatus(codes.Error, "the turn failed")
	}
	for _, st := range rec.Stages {
		_, s := t.tr.Start(ctx, fmt.Sprintf("stage %d", st.StageID), trace.WithTimestamp(end.Add(-ms(st.StageGenTimeMs))),
			trace.WithAttributes(
				attribute.Int("omniserve.stage_id", st.StageID),
				attribute.Float64("omniserve.stage_gen_time_ms", st.StageGenTimeMs),
				attribute.Int("omniserve.num_tokens_in", st.NumTokensIn),
				attribute.Int("omniserve.num_tokens_out", st.NumTokensOut),
				attribute.String("omniserve.finish_reason", st.FinishReason),
			))
		s.End(trace.WithTimestamp(end))
	}
	if v := rec.E2E.InputMs; v > 0 {
		_, s := t.tr.Start(ctx, InputSpanName, trace.WithTimestamp(start), trace.WithAttributes(attribute.Float64("omniserve.input_ms", v)))
		s.End(trace.WithTimestamp(start.Add(ms(v))))
	}
	if d := rec.E2E.DeliveryTotalMs; d > 0 && rec.AudioTTFPSeconds > 0 {
		first := rec.AudioTTFPSeconds * 1000
		_, s := t.tr.Start(ctx, OutputSpanName, trace.WithTimestamp(start.Add(ms(min(first, d)))), trace.WithAttributes(
			attribute.Float64("omniserve.audio_ttfp_ms", first),
			attribute.Float64("omniserve.delivery_total_ms", d),
			attribute.Float64("omniserve.audio_delivered_s", rec.E2E.AudioDeliveredS),
			attribute.Float64("omniserve.audio_played_s", rec.E2E.AudioPlayedS),
			attribute.Float64("omniserve.audio_underrun_s", rec.E2E.AudioUnderrunS),
		))
		s.End(trace.WithTimestamp(start.Add(ms(d))))
	}
	for _, e := range rec.Transfers {
		_, s := t.tr.Start(ctx, fmt.Sprintf("transfer %d->%d", e.FromStage, e.ToStage), trace.WithTimestamp(end.Add(-ms(e.TxTimeMs))),
			trace.WithAttributes(attribute.Float64("omniserve.tx_time_ms", e.TxTimeMs), attribute.Int64("omniserve.size_bytes", e.SizeBytes)))
		s.End(trace.WithTimestamp(end))
	}
	for _, c := range rec.ToolCalls {
		t.toolCallSpan(ctx, start, c)
	}
	span.End(trace.WithTimestamp(spanEnd))
	if sc := span.SpanContext(); sc.IsSampled() {
		return sc.TraceID().String()
	}
	return ""
}

// toolCallSpan exports one tool call of a turn whose span starts at t0: placed at the call's
// start (StartMs after t0; a function call, timed before its follow-up turn began, starts
// before it) and lasting its ToolCallStats figure. Its attributes name the call, never its
// arguments, output, headers or tokens.
func (t *Tracer) toolCallSpan(ctx context.Context, t0 time.Time, c metrics.ToolCallStats) {
	name := ToolCallSpanPrefix + c.Name
	if c.Kind == metrics.ToolKindMCP {
		name = MCPCallSpanPrefix + c.Name
	}
	outcome := "completed"
	if c.Error != "" {
		outcome = "failed"
	}
	attrs := []attribute.KeyValue{
		// The OpenTelemetry GenAI conventions' names for a tool execution, and omniserve's.
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", c.Name),
		attribute.String("gen_ai.tool.call.id", c.CallID),
		attribute.String("omniserve.tool.kind", c.Kind),
		attribute.String("omniserve.tool.outcome", outcome),
		attribute.Float64("omniserve.tool_call_ms", max(c.DurationMs, 0)),
	}
	if c.ServerLabel != "" {
		attrs = append(attrs, attribute.String("omniserve.mcp.server_label", c.ServerLabel))
	}
	if c.Error != "" {
		attrs = append(attrs, attribute.String("error.type", c.Error))
	}
	if c.DurationMs < 0 {
		attrs = append(attrs, attribute.Bool("omniserve.tool.reached_server", false))
	}
	begin := t0.Add(ms(c.StartMs))
	_, s := t.tr.Start(ctx, name, trace.WithTimestamp(begin), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	if c.Error != "" && c.Error != "cancelled" {
		// A cancelled call was the client's doing (its response ended first), not a failure.
		s.SetStatus(codes.Error, "the tool call failed: "+c.Error)
	}
	s.End(trace.WithTimestamp(begin.Add(ms(max(c.DurationMs, 0)))))
}

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func firstEnv(keys ...string) string {
	for _, k := range keys {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return ""
}

func firstNonEmpty(a ...string) string {
	for _, s := range a {
		if s != "" {
			return s
		}
	}
	return ""
}

// HTTPHook returns the hook the HTTP handlers call with each traced request and the id its
// records will carry: the request's traceparent becomes their parent. The returned func ends
// the registration (chat requests leave it to expire: their record may close later).
func (t *Tracer) HTTPHook() func(r *http.Request, id string) func() {
	if t == nil {
		return nil
	}
	return func(r *http.Request, id string) func() {
		t.Begin(Extract(r.Context(), propagation.HeaderCarrier(r.Header)), id)
		return func() { t.End(id) }
	}
}
