package realtime

import (
	"io"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// A read that fails while a write has been blocked for the write timeout is the client not
// reading (the timed-out write closed the socket), not a network drop; a close frame stays the
// client's decision.
func TestReadLossAfterTimedOutWrite(t *testing.T) {
	const wt = 5 * time.Second
	for _, tc := range []struct {
		name    string
		err     error
		writing time.Duration // how long a write has been in flight; 0: none
		want    loss
	}{
		{"no write in flight", io.EOF, 0, lostRead},
		{"a write just began", io.EOF, time.Second, lostRead},
		{"a write blocked for the timeout", io.EOF, wt, lostSlow},
		{"a close frame", websocket.CloseError{Code: websocket.StatusNormalClosure}, wt, lostClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &conn{h: &handler{cfg: HandlerConfig{WriteTimeout: wt}}}
			if tc.writing > 0 {
				c.writingSince.Store(time.Now().Add(-tc.writing).UnixNano())
			}
			require.Equal(t, tc.want, c.readLoss(tc.err))
		})
	}
}
