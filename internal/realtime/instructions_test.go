package realtime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

// userText is a conversation.item.create of one user text message.
func userText(text string) event {
	return event{"type": "conversation.item.create", "item": event{"type": "message", "role": "user",
		"content": []event{{"type": "input_text", "text": text}}}}
}

// nextErrorEvent reads up to the next error event and returns its error object.
func (c *wsClient) nextErrorEvent(timeout time.Duration) event {
	c.t.Helper()
	e, _ := c.until("error", timeout)
	return e.obj("error")
}

// TestInstructionsBounded: instructions over the byte limit are refused with
// string_above_max_length, instructions that cannot fit the model's context (dummy:tiny, 2048
// tokens) with context_length_exceeded, both naming session.instructions and leaving the
// session unchanged; the session then still answers a turn (no hang, as 1 MiB once caused).
func TestInstructionsBounded(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{MaxInstructionsBytes: 200 << 10}, realtime.HandlerConfig{}, nil)
	c := dial(t, srv.url, nil)
	c.update(event{"turn_detection": nil, "output_modalities": []string{"text"}, "max_output_tokens": 8})
	c.send(event{"type": "session.update", "session": event{}})
	before, _ := c.until("session.updated", 10*time.Second)

	cases := []struct {
		name, text, code string
	}{
		{"1 MiB", strings.Repeat("You are a helpful assistant. ", (1<<20)/29), "string_above_max_length"},
		{"just over the byte limit", strings.Repeat("a", 200<<10+1), "string_above_max_length"},
		{"100 KiB: over the context", strings.Repeat("You are a helpful assistant. ", (100<<10)/29), "context_length_exceeded"},
		{"3000 words: over the context", strings.Repeat("word ", 3000), "context_length_exceeded"},
	}
	for i, tc := range cases {
		id := "evt_instr_" + string(rune('a'+i))
		start := time.Now()
		c.send(event{"type": "session.update", "event_id": id, "session": event{"instructions": tc.text}})
		e := c.nextErrorEvent(30 * time.Second)
		t.Logf("%s (%d bytes): %s in %v: %s", tc.name, len(tc.text), e.str("code"), time.Since(start).Round(time.Millisecond), e.str("message"))
		require.Equal(t, tc.code, e.str("code"), tc.name)
		require.Equal(t, "session.instructions", e.str("param"), tc.name)
		require.Equal(t, id, e.str("event_id"), tc.name)
		require.Equal(t, "invalid_request_error", e.str("type"), tc.name)
	}
	c.send(event{"type": "session.update", "session": event{}})
	after, _ := c.until("session.updated", 10*time.Second)
	require.Equal(t, before.obj("session").str("instructions"), after.obj("session").str("instructions"), "a refused update changes nothing")

	// Instructions that fit are taken, and a turn completes.
	c.send(event{"type": "session.update", "session": event{"instructions": "Be brief."}})
	upd, _ := c.until("session.updated", 10*time.Second)
	require.Equal(t, "Be brief.", upd.obj("session").str("instructions"))
	c.send(userText("hello"))
	c.send(event{"type": "response.create"})
	out := readResponse(t, c, 2*time.Minute)
	require.Contains(t, []string{"completed", "incomplete"}, out.status, "a turn ends (incomplete: max_output_tokens 8)")
}
