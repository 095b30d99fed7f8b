package tracing

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// SessionSpanName is the session span's name when session.tracing gives no workflow_name.
const SessionSpanName = "realtime.session"

// sessionTTL bounds how long a session's span context stays registered: sessions may last
// hours (the registration is removed at close; this only guards against a close never seen).
const sessionTTL = 24 * time.Hour

// afterClose is how long a closed session's span context still parents its records: the last
// turn's record may be finalized just after the session returned.
const afterClose = time.Minute

// SessionHook returns the hook the realtime endpoints (WebSocket upgrade, WebRTC call) call
// when a session is created: it starts the session span, continuing the request's W3C
// traceparent, and registers it as the parent of the session's turn spans (whose records carry
// the session id). The returned func ends the span at close with the close reason and the
// session's tracing field ("auto" or {workflow_name, group_id, metadata}), which name and tag
// it. Turn spans are exported as their turns end, not held until the session closes.
//
// The returned context is base with the session span's context on it: the session runs under
// it, so requests its turns make to remote stages carry the session's traceparent.
func (t *Tracer) SessionHook() func(base context.Context, r *http.Request, sessionID string) (context.Context, func(reason string, tracing any)) {
	if t == nil {
		return nil
	}
	return func(base context.Context, r *http.Request, sessionID string) (context.Context, func(string, any)) {
		ctx := Extract(context.Background(), propagation.HeaderCarrier(r.Header))
		ctx, span := t.tr.Start(ctx, SessionSpanName, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("omniserve.session_id", sessionID)))
		t.begin(ctx, sessionID, sessionTTL)
		return trace.ContextWithSpanContext(base, span.SpanContext()), func(reason string, tracing any) {
			t.begin(ctx, sessionID, afterClose)
			span.SetAttributes(attribute.String("omniserve.close_reason", reason))
			name, attrs := tracingAttrs(tracing)
			span.SetAttributes(attrs...)
			if name != "" {
				span.SetName(name)
			}
			span.End()
		}
	}
}

// tracingAttrs turns session.tracing into the session span's name ("" = the default) and
// attributes. metadata values that are not strings are kept as their JSON.
func tracingAttrs(v any) (string, []attribute.KeyValue) {
	switch v := v.(type) {
	case string:
		return "", []attribute.KeyValue{attribute.String("omniserve.tracing", v)}
	case map[string]any:
		var attrs []attribute.KeyValue
		name, _ := v["workflow_name"].(string)
		if name != "" {
			attrs = append(attrs, attribute.String("omniserve.workflow_name", name))
		}
		if g, _ := v["group_id"].(string); g != "" {
			attrs = append(attrs, attribute.String("omniserve.group_id", g))
		}
		if md, ok := v["metadata"].(map[string]any); ok {
			for k, mv := range md {
				s, ok := mv.(string)
				if !ok {
					b, err := json.Marshal(mv)
					if err != nil {
						s = fmt.Sprint(mv)
					} else {
						s = string(b)
					}
				}
				attrs = append(attrs, attribute.String("omniserve.metadata."+k, s))
			}
		}
		return name, attrs
	}
	return "", nil
}
