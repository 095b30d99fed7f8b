package realtime_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

// TestNoiseReduction: audio.input.noise_reduction is kept and echoed (not dropped as null),
// the denoised input still transcribes, a bad type is an error naming its param, and null
// turns it off; the beta name is input_audio_noise_reduction.
func TestNoiseReduction(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{}, nil)
	c := dial(t, srv.url, nil)
	c.until("session.created", 10*time.Second)
	update := func(nr any) event {
		c.send(event{"type": "session.update", "session": event{"type": "realtime", "audio": event{"input": event{
			"turn_detection": nil, "noise_reduction": nr}}}})
		up, _ := c.until("session.updated", 10*time.Second)
		return up.obj("session").obj("audio").obj("input")
	}
	in := update(event{"type": "near_field"})
	require.Equal(t, "near_field", in.obj("noise_reduction").str("type"))
	c.appendAudio(append(append([]byte{}, goForward(t)...), silence(1000)...), 100, false)
	c.send(event{"type": "input_audio_buffer.commit"})
	tr, _ := c.until("conversation.item.input_audio_transcription.completed", 60*time.Second)
	require.Equal(t, "go forward ten meters", tr.str("transcript"), "denoised speech still transcribes")

	c.send(event{"type": "session.update", "event_id": "bad_nr", "session": event{"type": "realtime", "audio": event{"input": event{
		"noise_reduction": event{"type": "loud_room"}}}}})
	e, _ := c.until("error", 10*time.Second)
	require.Equal(t, "session.audio.input.noise_reduction.type", e.obj("error").str("param"))
	require.Equal(t, "invalid_value", e.obj("error").str("code"))

	in = update(nil)
	require.Nil(t, in["noise_reduction"])
	require.Contains(t, in, "noise_reduction")
	in = update(event{"type": "far_field"})
	require.Equal(t, "far_field", in.obj("noise_reduction").str("type"))

	beta := dial(t, srv.url, &websocket.DialOptions{HTTPHeader: http.Header{"OpenAI-Beta": {"realtime=v1"}}})
	beta.until("session.created", 10*time.Second)
	beta.send(event{"type": "session.update", "session": event{"input_audio_noise_reduction": event{"type": "far_field"}}})
	up, _ := beta.until("session.updated", 10*time.Second)
	require.Equal(t, "far_field", up.obj("session").obj("input_audio_noise_reduction").str("type"))
}
