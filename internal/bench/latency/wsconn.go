package latency

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// wsConn is one WebSocket of the bench's clients (Realtime's and GPT-Live's): a reader
// goroutine turns each frame into an event (decode; false skips the frame) on a bounded
// channel, closed when the connection ends; closeConn stops the reader and waits for it.
type wsConn[E any] struct {
	c      *websocket.Conn
	events chan E
	wg     sync.WaitGroup
	cancel context.CancelFunc

	errMu   sync.Mutex
	readErr error // why the reader stopped
}

// startConn starts the reader of c under ctx.
func startConn[E any](ctx context.Context, c *websocket.Conn, decode func(b []byte, at time.Time) (E, bool)) *wsConn[E] {
	c.SetReadLimit(64 << 20)
	rctx, cancel := context.WithCancel(ctx)
	w := &wsConn[E]{c: c, events: make(chan E, 4096), cancel: cancel}
	w.wg.Add(1)
	go w.read(rctx, decode)
	return w
}

func (w *wsConn[E]) read(ctx context.Context, decode func([]byte, time.Time) (E, bool)) {
	defer w.wg.Done()
	defer close(w.events)
	for {
		_, b, err := w.c.Read(ctx)
		if err != nil {
			w.errMu.Lock()
			w.readErr = err
			w.errMu.Unlock()
			return
		}
		e, ok := decode(b, time.Now())
		if !ok {
			continue
		}
		select {
		case w.events <- e:
		case <-ctx.Done():
			return
		}
	}
}

func (w *wsConn[E]) send(ctx context.Context, ev map[string]any) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return w.c.Write(ctx, websocket.MessageText, b)
}

// ended is why the reader stopped.
func (w *wsConn[E]) ended() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.readErr
}

// waitFor returns the first event that matches, failing on an event errOf calls an error, the
// end of the connection or the timeout.
func (w *wsConn[E]) waitFor(ctx context.Context, d time.Duration, match func(E) bool, errOf func(E) error) (E, error) {
	return waitEvent(ctx, w.events, d, match, errOf, w.ended)
}

func (w *wsConn[E]) closeConn() {
	_ = w.c.Close(websocket.StatusNormalClosure, "")
	w.cancel()
	w.wg.Wait()
}
