package otlpreceiver

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestReceivesWhatTheSDKExports: the OpenTelemetry SDK's own OTLP/HTTP exporter (gzip on and
// off) posts spans to the receiver, which decodes them, keeps at most keep and counts all.
func TestReceivesWhatTheSDKExports(t *testing.T) {
	tests := []struct {
		name     string
		compress otlptracehttp.Compression
		keep     int
		wantKept int
	}{
		{"plain", otlptracehttp.NoCompression, 10, 3},
		{"gzip", otlptracehttp.GzipCompression, 10, 3},
		{"bounded", otlptracehttp.NoCompression, 2, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Start(tc.keep)
			require.NoError(t, err)
			defer func() { require.NoError(t, r.Close()) }()
			ctx := context.Background()
			exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(r.Endpoint()+"/v1/traces"), otlptracehttp.WithCompression(tc.compress))
			require.NoError(t, err)
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			tr := tp.Tracer("test")
			for _, name := range []string{"a", "b", "c"} {
				_, s := tr.Start(ctx, name)
				s.End()
			}
			require.NoError(t, tp.Shutdown(ctx))
			require.Equal(t, 3, r.Count())
			require.Equal(t, 1, r.CountNamed("c"), "counted though not kept when bounded")
			require.Zero(t, r.CountNamed("d"))
			spans := r.Spans()
			require.Len(t, spans, tc.wantKept)
			require.Equal(t, "a", spans[0].GetName())
		})
	}
}

func TestRejectsWhatIsNotAnExport(t *testing.T) {
	r, err := Start(10)
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Close()) }()
	tests := []struct {
		name, method, path string
		body               []byte
		want               int
	}{
		{"not protobuf", http.MethodPost, "/v1/traces", []byte{0xff, 0xff, 0xff}, http.StatusBadRequest},
		{"wrong path", http.MethodPost, "/v1/metrics", nil, http.StatusNotFound},
		{"wrong method", http.MethodGet, "/v1/traces", nil, http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tc.method, r.Endpoint()+tc.path, bytes.NewReader(tc.body))
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, tc.want, resp.StatusCode)
		})
	}
	require.Zero(t, r.Count())
	http.DefaultClient.CloseIdleConnections()
}
