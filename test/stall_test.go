package test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// TestStalledReaderFoundByAge: at the default configuration (stall_timeout 10 s, write_timeout
// 5 s), a client that stops reading in the middle of a long spoken reply loses its connection,
// and its only admission slot comes back, within seconds of the stall, not after the tens of
// seconds of paced audio the socket buffers could absorb (46 s before). The client's own
// receive buffer is kept small, as a phone's or a congested path's effectively is.
func TestStalledReaderFoundByAge(t *testing.T) {
	raw, err := os.ReadFile("/usr/share/pocketsphinx/test/data/goforward.raw")
	require.NoError(t, err, "install pocketsphinx-testdata")
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"), "--max-sessions", "1", "--resume-grace", "0")
	url := "ws://" + s.addr + "/v1/realtime"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	small := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 32<<10) })
		if err != nil {
			return err
		}
		return serr
	}}).DialContext}}
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: small}) //nolint:bodyclose // coder/websocket closes it
	require.NoError(t, err)
	defer ws.CloseNow()
	ws.SetReadLimit(64 << 20)
	send := func(ev map[string]any) {
		b, err := json.Marshal(ev)
		require.NoError(t, err)
		require.NoError(t, ws.Write(ctx, websocket.MessageText, b))
	}
	send(map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "max_output_tokens": 4096,
		"audio": map[string]any{"input": map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 16000}, "turn_detection": nil}}}})
	for i := 0; i < len(raw); i += 3200 {
		send(map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(raw[i:min(i+3200, len(raw))])})
	}
	send(map[string]any{"type": "input_audio_buffer.commit"})
	send(map[string]any{"type": "response.create"})
	for {
		_, b, err := ws.Read(ctx)
		require.NoError(t, err)
		var ev map[string]any
		require.NoError(t, json.Unmarshal(b, &ev))
		require.NotEqual(t, "error", ev["type"], "%s", b)
		if ev["type"] == "response.output_audio.delta" {
			break
		}
	}
	stalled := time.Now() // the client stops reading here, its connection open
	var admitted time.Duration
	for time.Since(stalled) < 90*time.Second {
		c, resp, err := websocket.Dial(ctx, url, nil)
		if resp != nil && resp.Body != nil {
			_ = resp.Body.Close()
		}
		if err == nil {
			_, b, err := c.Read(ctx)
			require.NoError(t, err)
			require.Contains(t, string(b), "session.created")
			admitted = time.Since(stalled)
			_ = c.Close(websocket.StatusNormalClosure, "")
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	require.NotZero(t, admitted, "the stalled client kept the only slot for 90 s")
	t.Logf("a new client was admitted %v after the first client stopped reading (stall_timeout 10s, write_timeout 5s)", admitted.Round(100*time.Millisecond))
	require.Less(t, admitted, 20*time.Second)
	// The timed-out write closes the socket, so the read often fails first: the end is still the
	// client not reading (slow_client), never a network drop.
	require.Contains(t, s.logs.String(), "not reading")
	require.NotContains(t, s.logs.String(), `"reason":"disconnect"`)
}
