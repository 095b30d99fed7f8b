package realtime_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
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
	// The real backend without its instructions check, and a 2 MiB instructions bound: each
	// 1 MiB update is taken (the engine never opens, nothing is prefilled) and echoed in full.
	m := session.NewManager(session.ManagerConfig{MaxInstructionsBytes: 2 << 20},
		uncheckedBackend{getFixture(t).backend}, zap.NewNop())
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

// uncheckedBackend is a backend that does not check instructions against the model's context
// (it hides session.InstructionsChecker).
type uncheckedBackend struct{ session.Backend }

// A resumable session whose client stops reading is detached as soon as its outbound queue
// overflows, not when a blocked write times out: with a write timeout far away, the close is
// logged and the session waits for its resume within seconds, and while it waits its events go
// to the bounded journal. (Before, a failed queue of a resumable session kept every event the
// session produced until the writer gave up: a client sending 40-byte session.update events
// made the server queue a 1 MiB echo each, without bound, for the whole write timeout.)
func TestResumableStoppedReaderDetachedAtOverflow(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.InfoLevel)
	m := session.NewManager(session.ManagerConfig{MaxInstructionsBytes: 2 << 20, ResumeGrace: time.Minute},
		uncheckedBackend{getFixture(t).backend}, zap.NewNop())
	const writeTimeout = time.Minute
	hs := httptest.NewServer(realtime.NewHandler(realtime.HandlerConfig{WriteTimeout: writeTimeout}, m, zap.New(core)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, m.Shutdown(ctx))
		hs.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A small receive buffer: the server's writes block soon (the kernel would take tens of MiB).
	d := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 32<<10)
		}); err != nil {
			return err
		}
		return serr
	}}
	tr := &http.Transport{DialContext: d.DialContext}
	defer tr.CloseIdleConnections()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/v1/realtime",
		&websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	require.NoError(t, err)
	defer ws.CloseNow()
	_, first, err := ws.Read(ctx)
	require.NoError(t, err)
	var created struct {
		Type        string `json:"type"`
		ResumeToken string `json:"resume_token"`
	}
	require.NoError(t, json.Unmarshal(first, &created))
	require.Equal(t, "session.created", created.Type)
	require.NotEmpty(t, created.ResumeToken, "resume is on")

	b, err := json.Marshal(event{"type": "session.update", "session": event{"instructions": strings.Repeat("a", 1<<20)}})
	require.NoError(t, err)
	require.NoError(t, ws.Write(ctx, websocket.MessageText, b))
	// Each empty update is echoed with the whole session: 1 MiB of instructions for 40 bytes.
	// Paced, so that the writer keeps up until the socket is full and then blocks in a write:
	// the queue overflows behind it.
	tiny := []byte(`{"type":"session.update","session":{}}`)
	start := time.Now()
	for range 200 {
		if ws.Write(ctx, websocket.MessageText, tiny) != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.Eventually(t, func() bool {
		return logs.FilterMessage("realtime client is not reading; closing the connection (1008)").Len() == 1
	}, 20*time.Second, 10*time.Millisecond, "the overflow is noticed at once, not after the write timeout")
	require.Eventually(t, func() bool { return m.Detached() == 1 }, 10*time.Second, 10*time.Millisecond,
		"the session waits for its resume")
	t.Logf("detached %v after the first update (write timeout %v)", time.Since(start).Round(time.Millisecond), writeTimeout)
	require.Less(t, time.Since(start), writeTimeout/2)
	require.Equal(t, 1, m.Active(), "a detached session keeps its slot")
}
