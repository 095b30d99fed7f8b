package stage

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

// TestRemoteStageCarriesTraceparent: a request to a remote stage carries the W3C traceparent
// of the context it was made under (same trace id), and none without one.
func TestRemoteStageCarriesTraceparent(t *testing.T) {
	tid, err := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	require.NoError(t, err)
	sid, err := trace.SpanIDFromHex("b7ad6b7169203331")
	require.NoError(t, err)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	tests := []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"traced", trace.ContextWithRemoteSpanContext(context.Background(), sc), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		{"untraced", context.Background(), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seen := make(chan string, 1)
			u := newUpstream(t, func(_ int, w http.ResponseWriter, r *http.Request, _ *upstream) {
				seen <- r.Header.Get("traceparent")
				streamReply(w, "hi")
			})
			text, _, err := generateText(t, tc.ctx, u.cfg())
			require.NoError(t, err)
			require.Equal(t, "hi", text)
			require.Equal(t, tc.want, <-seen)
		})
	}
}
