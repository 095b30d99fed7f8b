package link

import (
	"fmt"
	"io"
	"testing"
	"time"

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
		want    Loss
	}{
		{"no write in flight", io.EOF, 0, LostRead},
		{"a write just began", io.EOF, time.Second, LostRead},
		{"a write blocked for the timeout", io.EOF, wt, LostSlow},
		{"a close frame", fmt.Errorf("%w: status 1000", ErrPeerClosed), wt, LostClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Conn{opts: Options{WriteTimeout: wt}}
			if tc.writing > 0 {
				c.writingSince.Store(time.Now().Add(-tc.writing).UnixNano())
			}
			require.Equal(t, tc.want, c.readLoss(tc.err))
		})
	}
}
