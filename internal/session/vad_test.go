package session

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/testenv"
)

// pcm16 encodes float samples as the wire's pcm16 little-endian bytes.
func pcm16(x []float32) []byte {
	b := make([]byte, 2*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(int16(v*32767)))
	}
	return b
}

// noiseBursts is n bursts of burstMs of loud uniform white noise, each followed by gapMs of
// digital silence, at 16 kHz.
func noiseBursts(rng *rand.Rand, n, burstMs, gapMs int) []float32 {
	var x []float32
	for range n {
		for range 16 * burstMs {
			x = append(x, float32(rng.Float64()*1.6-0.8))
		}
		x = append(x, make([]float32, 16*gapMs)...)
	}
	return x
}

// drainUntilAck sends a heartbeat and returns the event types that came before its ack: the
// session handles commands in order, so everything the appends before it caused is in there.
func drainUntilAck(t *testing.T, s *Session, sk *sink) []string {
	t.Helper()
	require.NoError(t, s.Submit(context.Background(), &Heartbeat{}))
	var types []string
	for {
		select {
		case ev := <-sk.ch:
			if ev.typ() == "session.heartbeat_ack" {
				return types
			}
			types = append(types, ev.typ())
		case <-time.After(5 * time.Second):
			t.Fatal("no session.heartbeat_ack")
		}
	}
}

// TestBargeInNeedsSpeech: under server_vad, noise bursts shorter than the VAD's minimum speech
// duration (200 ms of them, which the old 100 ms energy detector took for speech) leave the
// response playing, while real speech barges in with speech_started → overlap.decision →
// response.done cancelled (turn_detected), finished_reason barge_in.
func TestBargeInNeedsSpeech(t *testing.T) {
	raw := testenv.ReadFile(t, "/usr/share/pocketsphinx/test/data/goforward.raw", "pocketsphinx-testdata")
	eng := &fakeEngine{t: t}
	// A minute of lead: the fake engine never finishes, so the response stays active.
	s, sk, _, wait := startSessionWith(t, eng, time.Minute,
		ConfigPatch{TurnDetectionSet: true, TurnDetection: turnPatch(tdType("server_vad"), tdCreateResponse(false)),
			InputFormat: &AudioFormat{Type: "pcm16", Rate: 16000}})
	ctx := context.Background()
	appendChunks := func(b []byte) {
		for i := 0; i < len(b); i += 3200 { // 100 ms chunks, as a client streams them
			require.NoError(t, s.Submit(ctx, &AppendAudio{Data: b[i:min(i+3200, len(b))]}))
		}
	}
	appendChunks(make([]byte, 3200))
	require.NoError(t, s.Submit(ctx, &CommitInput{ResponseCreate: ptr(true)}))
	created := sk.until(t, "response.created")
	sk.until(t, "response.output_audio.delta")

	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name  string
		noise []float32
	}{
		{"4x50ms bursts", noiseBursts(rng, 4, 50, 250)},
		{"2x100ms bursts", noiseBursts(rng, 2, 100, 300)},
	}
	for _, tt := range tests {
		appendChunks(pcm16(tt.noise))
		types := drainUntilAck(t, s, sk)
		require.NotContains(t, types, "overlap.decision", tt.name)
		require.NotContains(t, types, "input_audio_buffer.speech_started", tt.name)
		require.NotContains(t, types, "response.done", tt.name)
	}

	appendChunks(raw)
	types := drainUntilAck(t, s, sk)
	iStart, iDecision, iDone := indexOf(types, "input_audio_buffer.speech_started"), indexOf(types, "overlap.decision"), indexOf(types, "response.done")
	require.GreaterOrEqual(t, iStart, 0, "speech did not start: %v", types)
	require.Less(t, iStart, iDecision, "%v", types)
	require.Less(t, iDecision, iDone, "%v", types)
	var decision, done Event
	sk.mu.Lock()
	for _, ev := range sk.events {
		switch ev.typ() {
		case "overlap.decision":
			decision = ev
		case "response.done":
			done = ev
		}
	}
	sk.mu.Unlock()
	require.Equal(t, "speech", decision.wire()["reason"])
	require.Equal(t, "barge_in", decision.wire()["action"])
	resp := done.wire()["response"].(map[string]any)
	require.Equal(t, created.wire()["response_id"], done.wire()["response_id"])
	require.Equal(t, "cancelled", resp["status"])
	require.Equal(t, "turn_detected", resp["status_details"].(map[string]any)["reason"])
	require.Contains(t, eng.list(), "finalize:barge_in")

	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	require.Equal(t, ReasonClientClose, wait())
	require.Nil(t, s.inputAudio.vad, "the WebRTC instance (C memory) is freed on exit")
}
