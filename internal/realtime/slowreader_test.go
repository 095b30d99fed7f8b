package realtime_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

// A client that stops reading is closed within the write timeout even when the session has
// nothing more to say: the writer's failure stops the session (slow_client, close 1008) and the
// slot comes back, instead of being held until the idle timeout.
func TestStoppedReaderClosedWithinWriteTimeout(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.InfoLevel)
	m := session.NewManager(session.ManagerConfig{}, getFixture(t).backend, zap.NewNop())
	hs := httptest.NewServer(realtime.NewHandler(realtime.HandlerConfig{WriteTimeout: 300 * time.Millisecond}, m, zap.New(core)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, m.Shutdown(ctx))
		hs.Close()
	})
	srv := &testServer{url: "ws" + strings.TrimPrefix(hs.URL, "http") + "/v1/realtime", m: m}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, srv.url, nil)
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	require.NoError(t, err)
	defer ws.CloseNow()
	// Each session.updated echoes ~1 MiB of instructions; nobody reads them, so the socket
	// buffers fill and a write blocks. Then the session goes quiet.
	big := strings.Repeat("a", 1<<20)
	for range 24 {
		b, err := json.Marshal(event{"type": "session.update", "session": event{"instructions": big}})
		require.NoError(t, err)
		if ws.Write(ctx, websocket.MessageText, b) != nil {
			break // the server already gave up on us: that is the point
		}
	}
	start := time.Now()
	srv.waitSlots(t, 0)
	t.Logf("slot back %v after the last event", time.Since(start))
	require.Less(t, time.Since(start), 5*time.Second)
	require.Eventually(t, func() bool {
		return logs.FilterMessage("realtime client is not reading; closing the connection (1008)").Len() == 1
	}, 5*time.Second, 10*time.Millisecond, "the close is logged")
}
