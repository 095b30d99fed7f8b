package test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/omniserve/omniserve/internal/rtcclient"
)

// withTraceparent adds a W3C traceparent to every request, as a traced app's HTTP client does.
type withTraceparent struct{ tp string }

func (w withTraceparent) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Traceparent", w.tp)
	return http.DefaultTransport.RoundTrip(r)
}

// TestTraceOfAWebRTCCall: a WebRTC call whose offer carries a W3C traceparent is a session span
// in that trace (a child of the caller's span), with its spoken turn as a child of the session
// span, exported to a real OTLP receiver when the call hangs up.
func TestTraceOfAWebRTCCall(t *testing.T) {
	rec := startOTLPReceiver(t)
	s := startBinaryEnv(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rec.Endpoint(), "OTEL_SERVICE_NAME=omniserve-test"},
		"--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--api-key", "sk")
	const trace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := rtcclient.Dial(ctx, rtcclient.Config{BaseURL: "http://" + s.addr, Key: "sk", MicRate: 24000,
		Session: []byte(`{"type":"realtime","max_output_tokens":6}`),
		HTTP:    &http.Client{Timeout: 30 * time.Second, Transport: withTraceparent{"00-" + trace + "-" + parent + "-01"}}})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.WaitFor(ctx, "session.created", 30*time.Second)
	require.NoError(t, err)

	b := speech24k(t, 1500*time.Millisecond) // server VAD ends the turn in the silence
	pcm := make([]int16, len(b)/2)
	for i := range pcm {
		pcm[i] = int16(binary.LittleEndian.Uint16(b[2*i:]))
	}
	c.StartSpeaking(pcm, time.Time{})
	_, err = c.WaitFor(ctx, "response.done", 60*time.Second)
	require.NoError(t, err)
	require.NoError(t, c.Hangup(ctx, "sk"))

	inTrace := func() []*tracepb.Span {
		var out []*tracepb.Span
		for _, sp := range rec.Spans() {
			if hex.EncodeToString(sp.TraceId) == trace {
				out = append(out, sp)
			}
		}
		return out
	}
	var session, turn *tracepb.Span
	defer func() {
		if t.Failed() {
			for _, sp := range rec.Spans() {
				t.Logf("span %s trace %x parent %x", sp.Name, sp.TraceId, sp.ParentSpanId)
			}
		}
	}()
	require.Eventually(t, func() bool {
		session, turn = nil, nil
		for _, sp := range inTrace() {
			switch sp.Name {
			case "realtime.session":
				session = sp
			case "realtime.turn":
				turn = sp
			}
		}
		return session != nil && turn != nil
	}, 20*time.Second, 100*time.Millisecond, "the call's session and turn spans reach the receiver")
	require.Equal(t, parent, hex.EncodeToString(session.ParentSpanId), "the session span continues the caller's span")
	require.True(t, bytes.Equal(turn.ParentSpanId, session.SpanId), "the turn is a child of the call's session span")
	require.LessOrEqual(t, session.StartTimeUnixNano, turn.StartTimeUnixNano)
	require.GreaterOrEqual(t, session.EndTimeUnixNano, turn.EndTimeUnixNano)
}
