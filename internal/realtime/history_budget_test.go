package realtime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

// TestHistoryByteBudget: past session_history_bytes the oldest items are dropped, each with
// conversation.item.deleted {reason: history_budget}; the newest stay, and the session still
// answers.
func TestHistoryByteBudget(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{MaxHistoryBytes: 2000}, realtime.HandlerConfig{}, nil)
	c := dial(t, srv.url, nil)
	c.update(event{"turn_detection": nil, "output_modalities": []string{"text"}, "max_output_tokens": 8})
	var deleted []string
	for i := range 5 {
		c.send(itemWithRole("item_"+string(rune('a'+i)), "user", strings.Repeat("word ", 120))) // 600 bytes
		c.send(event{"type": "session.heartbeat"})
		_, seen := c.until("session.heartbeat_ack", 10*time.Second)
		for _, e := range seen {
			if e.str("type") == "conversation.item.deleted" {
				require.Equal(t, "history_budget", e.str("reason"))
				deleted = append(deleted, e.str("item_id"))
			}
		}
	}
	require.Equal(t, []string{"item_a", "item_b"}, deleted, "3 × 600 bytes fit 2000, the oldest go")
	c.send(event{"type": "conversation.item.retrieve", "item_id": "item_a"})
	e, _ := c.until("error", 10*time.Second)
	require.Equal(t, "item_retrieve_invalid_item_id", e.obj("error").str("code"))
	c.send(event{"type": "conversation.item.retrieve", "item_id": "item_e"})
	c.until("conversation.item.retrieved", 10*time.Second)
	c.send(event{"type": "response.create"})
	out := readResponse(t, c, 2*time.Minute)
	require.Contains(t, []string{"completed", "incomplete"}, out.status)
}
