package link

import (
	"strings"
	"testing"

	"github.com/omniserve/omniserve/internal/protocol"
)

// The per-chunk cost of the transport on the hot path: budgeting an audio delta in the queue
// and encoding it with its envelope, as a typed event and as the map the session built before
// the events were typed (the Fields path, which tools.go and mcp.go still take).
func benchmarkAudioDelta(b *testing.B, ev func() Event) {
	b.ReportAllocs()
	for b.Loop() {
		e := ev()
		_ = eventBytes(e)
		if _, err := encodeEvent(e, protocol.Envelope{Type: e.Type, EventID: "event_0123456789abcdef", Seq: 42}); err != nil {
			b.Fatal(err)
		}
	}
}

var benchDelta = strings.Repeat("QUJD", 1600) // 100 ms of 24 kHz pcm16, base64

func BenchmarkAudioDeltaTyped(b *testing.B) {
	benchmarkAudioDelta(b, func() Event {
		return Event{Type: "response.output_audio.delta", Model: true, Payload: protocol.ResponseOutputAudioDelta{
			ResponseID: "resp-duplex-1-0-abcd", ItemID: "item_resp-duplex-1-0-abcd", Delta: benchDelta,
			Format: "pcm16", SampleRateHz: 24000, AudioDurationMs: 100}}
	})
}

func BenchmarkAudioDeltaMap(b *testing.B) {
	benchmarkAudioDelta(b, func() Event {
		return Event{Type: "response.output_audio.delta", Model: true, Fields: map[string]any{
			"response_id": "resp-duplex-1-0-abcd", "item_id": "item_resp-duplex-1-0-abcd", "output_index": 0, "content_index": 0,
			"delta": benchDelta, "format": "pcm16", "sample_rate_hz": 24000, "audio_duration_ms": 100.0}}
	})
}
