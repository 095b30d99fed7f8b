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
	// What an earlier test left behind (a session in its resume grace) is running now: its
	// goroutines are set aside by id. Ids are unique but not ordered (the runtime hands them out
	// in batches per P), so a threshold would not do.
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

// transportGoroutines names each goroutine not in skip whose stack runs through
// internal/realtime (not its tests) by the role its frames show; seen holds every goroutine id
// of the dump.
func transportGoroutines(skip map[int]bool) (roles []string, seen map[int]bool) {
	seen = map[int]bool{}
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		var id int
		if _, err := fmt.Sscanf(g, "goroutine %d ", &id); err != nil {
			continue
		}
		seen[id] = true
		if skip[id] {
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
	return roles, seen
}
