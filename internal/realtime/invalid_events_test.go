package realtime_test

import (
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

// countedInvalid is a realtime.InvalidEventCounter that remembers what it counted.
type countedInvalid struct {
	mu     sync.Mutex
	events map[string]int // dialect/reason
	closes map[string]int // dialect
}

func newCountedInvalid() *countedInvalid {
	return &countedInvalid{events: map[string]int{}, closes: map[string]int{}}
}

func (c *countedInvalid) CountInvalidEvent(dialect, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events[dialect+"/"+reason]++
}

func (c *countedInvalid) CountInvalidEventClose(dialect string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closes[dialect]++
}

func (c *countedInvalid) get(dialect, reason string) (events, closes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events[dialect+"/"+reason], c.closes[dialect]
}

// Every server event is numbered and a vllm-omni client acknowledges each one, errors too: an
// ack is consumed (the journal drops what it covers) and never answered, valid or not, so that
// acking the answer cannot loop (issue 38: 14,607 frames/s on an idle session).
func TestEventAckIsNeverAnswered(t *testing.T) {
	t.Parallel()
	counted := newCountedInvalid()
	srv := newServer(t, session.ManagerConfig{ResumeGrace: time.Minute}, realtime.HandlerConfig{InvalidEvents: counted}, nil)
	c := dial(t, srv.url+"?duplex=1", nil)
	created := c.update(event{"turn_detection": nil})
	sess := srv.m.Lookup(created.obj("session").str("id"))
	require.NotNil(t, sess)
	n, _ := realtime.JournalStats(sess.Sink())
	require.Equal(t, 2, n, "session.created and session.updated are journaled until acked")

	invalid := []event{
		{"type": "session.event_ack"},
		{"type": "session.event_ack", "server_event_seq": "2"},
		{"type": "session.event_ack", "server_event_seq": 1.5},
		{"type": "session.event_ack", "server_event_seq": -1},
		{"type": "session.event_ack", "server_event_seq": 1000, "event_id": "evt_ahead"},
	}
	for _, ack := range invalid {
		c.send(ack)
	}
	c.send(event{"type": "session.event_ack", "server_event_seq": 2})
	c.send(event{"type": "session.heartbeat"})
	// The first event after the acks answers the heartbeat: none of them was answered.
	e, ok := c.next(5 * time.Second)
	require.True(t, ok)
	require.Equal(t, "session.heartbeat_ack", e.str("type"), "%v", e)
	n, _ = realtime.JournalStats(sess.Sink())
	require.Equal(t, 1, n, "only the heartbeat's answer is unacked")
	c.send(event{"type": "session.event_ack", "server_event_seq": e["server_event_seq"]})
	require.Eventually(t, func() bool { n, _ := realtime.JournalStats(sess.Sink()); return n == 0 }, 5*time.Second, 10*time.Millisecond)
	_, ok = c.next(300 * time.Millisecond)
	require.False(t, ok, "nothing answers an ack")
	acks, closes := counted.get("vllm_duplex", "invalid_event_ack")
	require.Equal(t, len(invalid), acks, "each invalid ack is counted")
	require.Zero(t, closes)
}

// A client that sends invalid events (refused by the decoder, or by the session) faster than
// its budget gets a bounded number of errors, then session.closed and a 1008 close; both are
// counted. Events within the budget keep the session.
func TestInvalidEventFloodCloses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, query, dialect string
		flood                event
		code                 string
	}{
		{"unknown events (the decoder refuses)", "", "openai", event{"type": "no.such.event"}, "unknown_event"},
		{"empty commits (the session refuses)", "", "openai", event{"type": "input_audio_buffer.commit"}, "input_audio_buffer_commit_empty"},
		{"duplex: unknown events", "?duplex=1", "vllm_duplex", event{"type": "no.such.event"}, "unknown_event"},
		{"duplex: empty commits", "?duplex=1", "vllm_duplex", event{"type": "input_audio_buffer.commit"}, "input_audio_buffer_empty"},
		{"duplex: invalid acks are never answered", "?duplex=1", "vllm_duplex", event{"type": "session.event_ack", "server_event_seq": -1}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const burst = 5
			counted := newCountedInvalid()
			srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{InvalidEventBurst: burst, InvalidEventRate: 0.001, InvalidEvents: counted}, nil)
			c := dial(t, srv.url+tc.query, nil)
			c.update(event{"turn_detection": nil})
			for range 200 {
				if c.sendErr(tc.flood) != nil {
					break // closed under the flood
				}
			}
			errs := 0
			var closed event
			for closed == nil {
				e, ok := c.next(10 * time.Second)
				require.True(t, ok, "the connection ended without session.closed after %d errors", errs)
				switch e.str("type") {
				case "error":
					require.Equal(t, tc.code, e.obj("error").str("code"))
					errs++
				case "session.closed":
					closed = e
				}
			}
			want, reason := burst, tc.code
			if tc.code == "" {
				want, reason = 0, "invalid_event_ack" // spent from the budget, never answered
			}
			require.Equal(t, want, errs, "the budget's errors, no more")
			require.Equal(t, realtime.ReasonInvalidEvents, closed.str("reason"))
			require.Equal(t, websocket.StatusPolicyViolation, c.closeStatus())
			events, closes := counted.get(tc.dialect, reason)
			require.Greater(t, events, burst)
			require.Equal(t, 1, closes)
			srv.waitSlots(t, 0)
		})
	}
}
