package session

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// TestNoiseReduction: a noise_reduction type is applied (the session reports it and runs a
// denoiser on the input), null turns it off, and an unknown type is refused with its param.
func TestNoiseReduction(t *testing.T) {
	t.Parallel()
	m := NewManager(ManagerConfig{MaxSessions: 1}, &fakeBackend{&fakeEngine{t: t}}, zap.NewNop())
	sk := &sink{ch: make(chan Event, 1024)}
	patch := manual16k
	patch.NoiseReductionSet, patch.NoiseReduction = true, "far_field"
	s, wait := runSession(t, m, Options{}, sk, patch)
	sk.mu.Lock()
	updated := sk.events[len(sk.events)-1]
	sk.mu.Unlock()
	nr := func(ev Event) any {
		return ev.wire()["session"].(map[string]any)["audio"].(map[string]any)["input"].(map[string]any)["noise_reduction"]
	}
	require.Equal(t, map[string]any{"type": "far_field"}, nr(updated))

	ctx := context.Background()
	require.NoError(t, s.Submit(ctx, &AppendAudio{Data: make([]byte, 3200)}))
	require.NoError(t, s.Submit(ctx, &UpdateSession{Base: Base{ID: "evt_nr"}, Patch: ConfigPatch{NoiseReductionSet: true, NoiseReduction: "studio"}}))
	e := sk.until(t, "error").wire()["error"].(map[string]any)
	require.Equal(t, "invalid_value", e["code"])
	require.Equal(t, "session.audio.input.noise_reduction.type", e["param"])
	require.Equal(t, "evt_nr", e["event_id"])

	require.NoError(t, s.Submit(ctx, &UpdateSession{Patch: ConfigPatch{NoiseReductionSet: true}}))
	require.Nil(t, nr(sk.until(t, "session.updated")), "null turns it off")
	require.NoError(t, s.Submit(ctx, &CloseSession{}))
	wait()
}
