package speech

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
)

// echoScene streams 100 ms blocks: the assistant's audio (assistant) is sent as reference one
// block at a time and comes back in the microphone delayed by delayMs at the given gain, mixed
// with the user's speech (user, may be nil) starting at userAtMs. It reports whether a barge-in
// VAD (the session's settings: 240 ms of speech) fires on the canceller's output and on the raw
// microphone, and the canceller's last delay estimate.
func echoScene(t *testing.T, assistant, user []float32, delayMs int, gain float32, userAtMs int) (cancelled, raw bool, delay int) {
	t.Helper()
	const block = 1600
	newVAD := func() *VAD {
		v, err := NewVAD(VADConfig{SampleRate: audio.ASRSampleRate, MinSpeechMs: 240})
		require.NoError(t, err)
		t.Cleanup(v.Close)
		return v
	}
	vc, vr := newVAD(), newVAD()
	ec := audio.NewEchoCanceller(400)
	d := delayMs * audio.ASRSampleRate / 1000
	u0 := userAtMs * audio.ASRSampleRate / 1000
	total := len(assistant) + d
	if user != nil {
		total = max(total, u0+len(user))
	}
	mic := make([]float32, total)
	for i, v := range assistant {
		mic[i+d] += gain * v
	}
	for i, v := range user {
		mic[u0+i] += v
	}
	for off := 0; off < total; off += block {
		if off < len(assistant) {
			ec.Reference(assistant[off:min(off+block, len(assistant))])
		}
		in := mic[off:min(off+block, total)]
		out := ec.Process(in)
		if ec.Gain > 0 {
			delay = ec.Delay
		}
		evc, err := vc.Process(out)
		require.NoError(t, err)
		evr, err := vr.Process(in)
		require.NoError(t, err)
		for _, e := range evc {
			cancelled = cancelled || e.Kind == SpeechStarted
		}
		for _, e := range evr {
			raw = raw || e.Kind == SpeechStarted
		}
	}
	return cancelled, raw, delay
}

// TestEchoCancellerEchoDoesNotBargeIn: the assistant's own voice fed back at −6 dB with 120 ms
// delay (the bench's echo) makes the raw VAD fire, never the VAD behind the canceller, and the
// canceller finds the delay; real user speech over the same echo is still detected.
func TestEchoCancellerEchoDoesNotBargeIn(t *testing.T) {
	assistant := loadRaw(t, goforwardRaw)
	user := loadRaw(t, "/usr/share/pocketsphinx/test/data/numbers.raw")
	for _, delayMs := range []int{0, 40, 120, 300} {
		cancelled, raw, delay := echoScene(t, assistant, nil, delayMs, 0.5, 0)
		require.True(t, raw, "delay %d ms: the echo alone must fool a plain VAD, or the test shows nothing", delayMs)
		require.False(t, cancelled, "delay %d ms: echo barged in", delayMs)
		require.InDelta(t, delayMs*16, delay, 2, "delay estimate")
	}
	cancelled, _, _ := echoScene(t, assistant, user[:3*audio.ASRSampleRate], 120, 0.5, 500)
	require.True(t, cancelled, "user speech over the echo must still be detected")
	cancelled, _, _ = echoScene(t, nil, user[:3*audio.ASRSampleRate], 120, 0.5, 0)
	require.True(t, cancelled, "without any reference the input passes unchanged")
}
