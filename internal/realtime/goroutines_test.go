package realtime_test

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

// TestGoroutinesPerSession holds an open WebSocket session to the goroutines the package docs
// promise (doc.go here and in link): the upgrade's goroutine running the core's watch, the
// core's reader and writer, and the session's actor (the goroutine runSession starts). Any other
// goroutine running this package's code is one nobody documented.
func TestGoroutinesPerSession(t *testing.T) {
	srv := newServer(t, session.ManagerConfig{MaxSessions: 2}, realtime.HandlerConfig{}, nil)
	// What an earlier test left behind (a session in its resume grace) runs already. (Goroutine
	// ids are not a clock: each P takes them in batches, so a newer goroutine may have a smaller
	// id than an older one, and "above the largest id seen" missed this session's goroutines
	// now and then under load.)
	_, before := transportGoroutines(nil)
	c := dial(t, srv.url, nil)
	c.until("session.created", 10*time.Second)
	var got []string
	require.Eventually(t, func() bool {
		got, _ = transportGoroutines(before)
		return len(got) == 4
	}, 5*time.Second, 20*time.Millisecond, "goroutines running internal/realtime: %v", got)
	slices.Sort(got)
	require.Equal(t, []string{"actor", "reader", "watch", "writer"}, got)
	c.close()
}

// transportGoroutines names each goroutine not in before whose stack runs through
// internal/realtime (not its tests) by the role its frames show; all is the id of every goroutine
// running.
func transportGoroutines(before map[int]bool) (roles []string, all map[int]bool) {
	all = map[int]bool{}
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		var id int
		if _, err := fmt.Sscanf(g, "goroutine %d ", &id); err != nil {
			continue
		}
		all[id] = true
		if before[id] {
			continue
		}
		var frames []string
		for _, l := range strings.Split(g, "\n") {
			if strings.HasPrefix(l, "created by") {
				break
			}
			if strings.Contains(l, "omniserve/internal/realtime") && !strings.Contains(l, "realtime_test") && !strings.HasPrefix(l, "\t") {
				frames = append(frames, l)
			}
		}
		if len(frames) == 0 {
			continue
		}
		s := strings.Join(frames, " ")
		switch {
		case strings.Contains(s, "runSession"):
			roles = append(roles, "actor")
		case strings.Contains(s, "link.(*Conn).readLoop"):
			roles = append(roles, "reader")
		case strings.Contains(s, "link.(*Conn).writeLoop"):
			roles = append(roles, "writer")
		case strings.Contains(s, "link.(*Conn).Serve"):
			roles = append(roles, "watch")
		default:
			roles = append(roles, s)
		}
	}
	return roles, all
}
