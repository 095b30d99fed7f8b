package realtime_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

// TestSessionSamplingSeed: at a temperature above 0 a realtime session draws a fresh random
// seed per response (equal conversations get different replies, as chat completions without a
// seed do), and the extension extra_body.seed makes replies reproducible.
func TestSessionSamplingSeed(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{}, nil)
	reply := func(extra event) string {
		c := dial(t, srv.url, nil)
		upd := event{"type": "realtime", "output_modalities": []string{"text"}, "turn_detection": nil,
			"max_output_tokens": 16, "temperature": 1.5}
		if extra != nil {
			upd["extra_body"] = extra
		}
		c.update(upd)
		c.send(userText("tell me something"))
		text, _, _ := specReply(t, c, nil)
		c.close()
		return text
	}
	random := map[string]bool{}
	for range 3 {
		r := reply(nil)
		t.Logf("no seed: %q", r)
		random[r] = true
	}
	require.Greater(t, len(random), 1, "without a seed, equal conversations get different replies")
	a, b := reply(event{"seed": 7}), reply(event{"seed": 7})
	t.Logf("seed 7: %q, %q", a, b)
	require.Equal(t, a, b, "with a seed, replies are reproducible")
	require.NotEmpty(t, a)
}
