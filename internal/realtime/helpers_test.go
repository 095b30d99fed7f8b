package realtime_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
	"github.com/omniserve/omniserve/internal/testenv"
)

type testServer struct {
	url string
	m   *session.Manager
}

func newServer(t *testing.T, mcfg session.ManagerConfig, hcfg realtime.HandlerConfig, backend session.Backend) *testServer {
	t.Helper()
	if backend == nil {
		backend = getFixture(t).backend
	}
	if mcfg.MaxOutputLead == 0 {
		mcfg.MaxOutputLead = time.Minute // tests that are not about pacing get the audio at once
	}
	m := session.NewManager(mcfg, backend, zap.NewNop())
	srv := httptest.NewServer(realtime.NewHandler(hcfg, m, zap.NewNop()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, m.Shutdown(ctx))
		srv.Close()
	})
	return &testServer{url: "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/realtime", m: m}
}

// waitSlots waits until the manager holds n admission slots.
func (s *testServer) waitSlots(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return s.m.Active() == n }, 10*time.Second, 10*time.Millisecond,
		"admission slots: want %d, have %d", n, s.m.Active())
}

type event map[string]any

func (e event) str(k string) string { s, _ := e[k].(string); return s }

func (e event) obj(k string) event {
	m, _ := e[k].(map[string]any)
	return m
}

type wsClient struct {
	t         *testing.T
	ws        *websocket.Conn
	events    chan event
	done      chan struct{}
	ctx       context.Context
	cancel    context.CancelFunc
	mu        sync.Mutex
	closeE    error
	lastSq    float64
	closeOnce sync.Once
	// vllm: the connection speaks vllm-omni's dialect (?duplex=1, /v1/duplex), whose input is
	// 16 kHz unless named: appendAudio names its 24 kHz.
	vllm bool
}

func dial(t *testing.T, url string, opts *websocket.DialOptions) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	ws, resp, err := websocket.Dial(ctx, url, opts)
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	require.NoError(t, err)
	ws.SetReadLimit(64 << 20)
	c := &wsClient{t: t, ws: ws, events: make(chan event, 4096), done: make(chan struct{}), ctx: ctx, cancel: cancel,
		vllm: strings.Contains(url, "duplex=1") || strings.Contains(url, "/v1/duplex")}
	go c.read()
	t.Cleanup(c.close)
	return c
}

func (c *wsClient) read() {
	defer close(c.done)
	defer close(c.events)
	for {
		_, data, err := c.ws.Read(c.ctx)
		if err != nil {
			c.mu.Lock()
			c.closeE = err
			c.mu.Unlock()
			return
		}
		var e event
		if err := json.Unmarshal(data, &e); err != nil {
			e = event{"type": "client.bad_json"}
		}
		select {
		case c.events <- e:
		case <-c.ctx.Done():
			return
		}
	}
}

func (c *wsClient) close() {
	c.closeOnce.Do(func() {
		_ = c.ws.CloseNow()
		c.cancel()
		<-c.done
	})
}

func (c *wsClient) sendErr(e event) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return c.ws.Write(c.ctx, websocket.MessageText, data)
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func (c *wsClient) send(e event) {
	c.t.Helper()
	data, err := json.Marshal(e)
	require.NoError(c.t, err)
	require.NoError(c.t, c.ws.Write(c.ctx, websocket.MessageText, data))
}

// next returns the next event, checking the invariants every outbound event has.
func (c *wsClient) next(timeout time.Duration) (event, bool) {
	c.t.Helper()
	select {
	case e, ok := <-c.events:
		if !ok {
			return nil, false
		}
		require.True(c.t, strings.HasPrefix(e.str("event_id"), "event_"), "event_id on %v", e["type"])
		sq, _ := e["server_event_seq"].(float64)
		require.Greater(c.t, sq, c.lastSq, "server_event_seq is monotonic")
		c.lastSq = sq
		return e, true
	case <-time.After(timeout):
		return nil, false
	}
}

// until reads events until one of type typ arrives; it returns it and the events before it.
func (c *wsClient) until(typ string, timeout time.Duration) (event, []event) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var seen []event
	for {
		e, ok := c.next(time.Until(deadline))
		if !ok {
			types := make([]string, 0, len(seen))
			for _, s := range seen {
				if s.str("type") == "error" {
					types = append(types, "error:"+s.obj("error").str("code")+":"+s.obj("error").str("message"))
					continue
				}
				types = append(types, s.str("type"))
			}
			c.t.Fatalf("no %s within %v; saw %v", typ, timeout, types)
		}
		if e.str("type") == typ {
			return e, seen
		}
		seen = append(seen, e)
	}
}

func (c *wsClient) closeStatus() websocket.StatusCode {
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return websocket.CloseStatus(c.closeE)
}

var (
	speechOnce sync.Once
	speechPCM  []byte
)

// goForward is pocketsphinx's test utterance "go forward ten meters" (16 kHz in the file),
// resampled to OpenAI's 24 kHz mono PCM16, the session default.
func goForward(t testing.TB) []byte {
	speechOnce.Do(func() {
		b, err := os.ReadFile("/usr/share/pocketsphinx/test/data/goforward.raw")
		if err != nil {
			return
		}
		pcm, err := audio.PCM16BytesToFloat32(nil, b)
		if err != nil {
			return
		}
		up, err := audio.Resample(pcm, 16000, 24000)
		if err != nil {
			return
		}
		speechPCM = audio.Float32ToPCM16Bytes(nil, up)
	})
	if speechPCM == nil {
		testenv.NeedFile(t, "/usr/share/pocketsphinx/test/data/goforward.raw", "pocketsphinx-testdata")
		t.Fatal("pocketsphinx test data unreadable")
	}
	return speechPCM
}

// bytesPerMs is 24 kHz mono PCM16.
const bytesPerMs = 48

func silence(ms int) []byte { return make([]byte, bytesPerMs*ms) }

// appendAudio sends pcm16 24 kHz audio in chunkMs pieces; with realTime it paces them.
func (c *wsClient) appendAudio(pcm []byte, chunkMs int, realTime bool) {
	c.t.Helper()
	step := bytesPerMs * chunkMs
	for i := 0; i < len(pcm); i += step {
		end := min(i+step, len(pcm))
		ev := event{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(pcm[i:end])}
		if c.vllm {
			ev["sample_rate_hz"] = 24000
		}
		c.send(ev)
		if realTime {
			time.Sleep(time.Duration(chunkMs) * time.Millisecond)
		}
	}
}

func (c *wsClient) update(s event) event {
	c.t.Helper()
	c.send(event{"type": "session.update", "session": s})
	created, _ := c.until("session.created", 10*time.Second)
	c.until("session.updated", 10*time.Second)
	return created
}

func httpStatus(t *testing.T, url string, header http.Header) (int, event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: header})
	require.Error(t, err)
	require.NotNil(t, resp)
	var body event
	if resp.Body != nil {
		_ = json.NewDecoder(resp.Body).Decode(&body)
		_ = resp.Body.Close()
	}
	return resp.StatusCode, body
}
