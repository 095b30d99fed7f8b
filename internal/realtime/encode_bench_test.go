package realtime

import (
	"strings"
	"testing"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// The per-chunk cost of the transport on the hot path: budgeting an audio delta in the queue
// and encoding it with its envelope, as a typed event and from the session's effect (the
// translation included).
func benchmarkAudioDelta(b *testing.B, ev func() outEvent) {
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
	benchmarkAudioDelta(b, func() outEvent {
		return outEvent{Type: "response.output_audio.delta", Model: true, Payload: protocol.ResponseOutputAudioDelta{
			ResponseID: "resp-duplex-1-0-abcd", ItemID: "item_resp-duplex-1-0-abcd", Delta: benchDelta,
			Format: "pcm16", SampleRateHz: 24000, AudioDurationMs: 100}}
	})
}

var benchAudio = make([]byte, 4800) // 100 ms of 24 kHz pcm16

func BenchmarkAudioDeltaEffect(b *testing.B) {
	benchmarkAudioDelta(b, func() outEvent {
		ev, _ := outbound(session.Event{Model: true, Effect: session.OutputDelta{Kind: session.PartAudio,
			ResponseID: "resp-duplex-1-0-abcd", ItemID: "item_resp-duplex-1-0-abcd", Audio: benchAudio,
			Format: session.AudioFormat{Type: "pcm16", Rate: 24000}, DurationMs: 100}})
		return ev
	})
}
