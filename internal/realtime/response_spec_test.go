package realtime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

// specReply sends response.create with response r and reads it to response.done; it returns
// the reply text, the response.done event and the event types in between.
func specReply(t *testing.T, c *wsClient, r event) (string, event, []string) {
	t.Helper()
	ev := event{"type": "response.create"}
	if r != nil {
		ev["response"] = r
	}
	c.send(ev)
	created, _ := c.until("response.created", time.Minute)
	if r != nil && r["conversation"] == "none" {
		require.Nil(t, created.obj("response")["conversation_id"], "out of band: no conversation")
	}
	var types []string
	for {
		e, ok := c.next(2 * time.Minute)
		require.True(t, ok, "no response.done")
		types = append(types, e.str("type"))
		if e.str("type") == "response.done" {
			out := e.obj("response")["output"].([]any)
			require.Len(t, out, 1)
			content := out[0].(map[string]any)["content"].([]any)
			text, _ := content[0].(map[string]any)["text"].(string)
			return text, e, types
		}
	}
}

// textSession opens a text-only manual-turn session with the given user items.
func textSession(t *testing.T, srv *testServer, items ...event) *wsClient {
	t.Helper()
	c := dial(t, srv.url, nil)
	c.update(event{"turn_detection": nil, "output_modalities": []string{"text"}, "max_output_tokens": 8})
	for _, it := range items {
		c.send(it)
		c.until("conversation.item.done", 10*time.Second)
	}
	return c
}

func itemWithRole(id, role, text string) event {
	return event{"type": "conversation.item.create", "item": event{"id": id, "type": "message", "role": role,
		"content": []event{{"type": "input_text", "text": text}}}}
}

// TestResponseSpec: per-response instructions and out-of-band responses as OpenAI documents
// them, checked against sessions that hold the same context as a plain conversation (greedy
// sampling: equal contexts give equal replies).
//   - conversation "none" over the conversation reads what an in-band response reads, sends no
//     conversation.item.* events, reports conversation_id null, echoes metadata, and leaves
//     the conversation as it was (the next in-band reply equals a session without it);
//   - per-response instructions change what that response reads, and only that response;
//   - input[] replaces the conversation (messages and item references);
//   - an in-band response with its own instructions joins the conversation.
//
// Not parallel: replies are compared across sessions, and a quiet engine keeps the batches
// (and so the floating-point sums) of the compared runs alike.
func TestResponseSpec(t *testing.T) {
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{}, nil)
	hello := itemWithRole("item_hello", "user", "hello there")

	// The reference: a plain in-band reply to "hello there".
	ref := textSession(t, srv, hello)
	want, _, _ := specReply(t, ref, nil)
	t.Logf("in-band reply: %q", want)
	require.NotEmpty(t, want)
	ref.close()

	// Out of band over the conversation, with metadata.
	c := textSession(t, srv, hello)
	oob, done, types := specReply(t, c, event{"conversation": "none", "metadata": event{"topic": "summary"}})
	t.Logf("out-of-band reply: %q; events %v", oob, types)
	require.Equal(t, want, oob, "out of band reads the conversation as an in-band response does")
	require.NotContains(t, types, "conversation.item.added")
	require.NotContains(t, types, "conversation.item.done")
	r := done.obj("response")
	require.Nil(t, r["conversation_id"])
	require.Equal(t, map[string]any{"topic": "summary"}, r["metadata"])
	require.Contains(t, []string{"completed", "incomplete"}, r.str("status"), "incomplete: max_output_tokens 8")
	oobItem := r["output"].([]any)[0].(map[string]any)["id"].(string)
	c.send(event{"type": "conversation.item.retrieve", "item_id": oobItem})
	e, _ := c.until("error", 10*time.Second)
	require.Equal(t, "item_retrieve_invalid_item_id", e.obj("error").str("code"), "the out-of-band item is not in the conversation")
	// The conversation is unchanged: the in-band reply equals the reference.
	got, _, types := specReply(t, c, nil)
	require.Equal(t, want, got, "the out-of-band reply did not join the conversation")
	require.Contains(t, types, "conversation.item.added")
	c.close()

	// Per-response instructions change what that response reads (the reply differs from the
	// plain one, and equals the same request in a fresh session), and only that response.
	sys := "Answer in one word."
	c = textSession(t, srv, hello)
	wantSys, _, _ := specReply(t, c, event{"conversation": "none", "instructions": sys})
	t.Logf("reply with per-response instructions: %q", wantSys)
	require.NotEqual(t, want, wantSys, "the instructions were read")
	got, _, _ = specReply(t, c, nil)
	require.Equal(t, want, got, "the per-response instructions applied to that response only")
	c.close()
	c = textSession(t, srv, hello)
	got, _, _ = specReply(t, c, event{"conversation": "none", "instructions": sys})
	require.Equal(t, wantSys, got, "equal requests over equal conversations give equal replies")
	c.close()

	// input[] replaces the conversation: a message, and an item reference.
	other := itemWithRole("item_other", "user", "something else entirely")
	c = textSession(t, srv, other, hello)
	got, _, _ = specReply(t, c, event{"conversation": "none", "input": []event{{"type": "message", "role": "user",
		"content": []event{{"type": "input_text", "text": "hello there"}}}}})
	require.Equal(t, want, got, "input[] is the whole context")
	got, _, _ = specReply(t, c, event{"conversation": "none", "input": []event{{"type": "item_reference", "id": "item_hello"}}})
	require.Equal(t, want, got, "an item_reference reads the item")
	c.close()

	// In band with its own instructions: the reply joins the conversation.
	c = textSession(t, srv, hello)
	inband, done, types := specReply(t, c, event{"instructions": sys})
	require.Equal(t, wantSys, inband)
	require.Contains(t, types, "conversation.item.done")
	require.NotNil(t, done.obj("response")["conversation_id"])
	item := done.obj("response")["output"].([]any)[0].(map[string]any)["id"].(string)
	c.send(event{"type": "conversation.item.retrieve", "item_id": item})
	ret, _ := c.until("conversation.item.retrieved", 10*time.Second)
	require.Equal(t, item, ret.obj("item").str("id"))

	// An input that cannot fit the model's context is refused by the admission rule, naming
	// its param, before the response begins and before any prefill; the session goes on.
	c.send(event{"type": "response.create", "response": event{"conversation": "none", "input": []event{{"type": "message",
		"role": "user", "content": []event{{"type": "input_text", "text": strings.Repeat("word ", 3000)}}}}}})
	e, _ = c.until("error", time.Minute)
	require.Contains(t, []string{"context_length_exceeded", "string_above_max_length"}, e.obj("error").str("code"))
	require.True(t, strings.HasPrefix(e.obj("error").str("param"), "response.input"), "%v", e)
	// Per-response instructions are bounded as the session's are.
	c.send(event{"type": "response.create", "event_id": "evt_long", "response": event{"instructions": strings.Repeat("word ", 3000)}})
	e, _ = c.until("error", time.Minute)
	require.Equal(t, "context_length_exceeded", e.obj("error").str("code"))
	require.Equal(t, "response.instructions", e.obj("error").str("param"))
	require.Equal(t, "evt_long", e.obj("error").str("event_id"))
	got, _, _ = specReply(t, c, event{"conversation": "none"})
	require.NotEmpty(t, got, "the session goes on")
	c.close()
}
