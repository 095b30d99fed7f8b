package realtime

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/coder/websocket"

	"github.com/omniserve/omniserve/internal/realtime/link"
)

// wsTransport is the WebSocket's part of the connection core (link.Transport): one frame read
// or written with coder/websocket, and its close.
type wsTransport struct {
	ws       *websocket.Conn
	maxEvent int64 // MaxEventBytes
}

// ReadFrame reads one frame, bounded by MaxEventBytes; an oversized frame is discarded and
// refused, and the connection stays usable.
func (t wsTransport) ReadFrame(ctx context.Context) ([]byte, error) {
	typ, r, err := t.ws.Reader(ctx)
	if err != nil {
		return nil, wsReadError(err)
	}
	data, err := io.ReadAll(io.LimitReader(r, t.maxEvent+1))
	if err != nil {
		return nil, wsReadError(err)
	}
	if int64(len(data)) > t.maxEvent {
		if _, err := io.Copy(io.Discard, r); err != nil {
			return nil, wsReadError(err)
		}
		return nil, &WireError{Code: "event_too_large", Param: "", Message: fmt.Sprintf("the event exceeds %d bytes", t.maxEvent)}
	}
	if typ != websocket.MessageText {
		return nil, &WireError{Code: "invalid_json", Message: "events must be JSON text frames"}
	}
	return data, nil
}

// wsReadError marks a close frame from the client as the peer's decision (link.ErrPeerClosed).
func wsReadError(err error) error {
	if websocket.CloseStatus(err) != -1 {
		return fmt.Errorf("%w: %w", link.ErrPeerClosed, err)
	}
	return err
}

func (t wsTransport) WriteFrame(ctx context.Context, data []byte) error {
	return t.ws.Write(ctx, websocket.MessageText, data)
}

// Close sends the close frame and waits for the client's, for at most wait in all (0 code: at
// once, no close frame). coder/websocket itself gives the close frame 5 s to get past a write
// in flight and the client's answer 5 s more.
func (t wsTransport) Close(code int, reason string, wait time.Duration) {
	if code == 0 {
		_ = t.ws.CloseNow()
		return
	}
	abort := time.AfterFunc(wait, func() { _ = t.ws.CloseNow() })
	defer abort.Stop()
	_ = t.ws.Close(websocket.StatusCode(code), reason)
}
