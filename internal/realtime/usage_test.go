package realtime_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

// usageOf returns a response.done usage flattened (input.text, cached.audio, ...), checking
// that every field is an integer and that the parts add up to the totals as OpenAI's do.
func usageOf(t *testing.T, done event) map[string]int {
	t.Helper()
	u := done.obj("response").obj("usage")
	require.NotNil(t, u, "response.done has usage")
	n := func(m event, k string) int {
		v, ok := m[k].(float64)
		require.True(t, ok, "usage %s is a number: %v", k, m[k])
		require.Equal(t, math.Trunc(v), v, "usage %s is an integer", k)
		require.GreaterOrEqual(t, v, 0.0, k)
		return int(v)
	}
	in, out := u.obj("input_token_details"), u.obj("output_token_details")
	cached := in.obj("cached_tokens_details")
	got := map[string]int{
		"total": n(u, "total_tokens"), "input": n(u, "input_tokens"), "output": n(u, "output_tokens"),
		"input.text": n(in, "text_tokens"), "input.audio": n(in, "audio_tokens"), "input.image": n(in, "image_tokens"),
		"cached": n(in, "cached_tokens"), "cached.text": n(cached, "text_tokens"), "cached.audio": n(cached, "audio_tokens"),
		"cached.image": n(cached, "image_tokens"), "output.text": n(out, "text_tokens"), "output.audio": n(out, "audio_tokens"),
	}
	require.Equal(t, got["input"]+got["output"], got["total"])
	require.Equal(t, got["input.text"]+got["input.audio"]+got["input.image"], got["input"])
	require.Equal(t, got["output.text"]+got["output.audio"], got["output"])
	require.Equal(t, got["cached.text"]+got["cached.audio"]+got["cached.image"], got["cached"])
	require.LessOrEqual(t, got["cached.text"], got["input.text"])
	require.LessOrEqual(t, got["cached.audio"], got["input.audio"])
	return got
}

// TestResponseUsage: response.done usage counts the engine's tokens. Output text tokens are the
// tokens generated (max_output_tokens of them when cut there), output audio tokens one per 50
// ms of audio sent; the second turn reads the first one's prompt and reply from the KV cache,
// so exactly those are cached; an out-of-band response with its own input caches nothing; a
// cancelled response still reports a consistent usage.
func TestResponseUsage(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{}, nil)
	c := dial(t, srv.url, nil)
	const maxTokens = 5
	c.update(event{"turn_detection": nil, "instructions": "Answer briefly.", "max_output_tokens": maxTokens})
	say := func(text string) {
		c.send(event{"type": "conversation.item.create", "item": event{"type": "message", "role": "user",
			"content": []event{{"type": "input_text", "text": text}}}})
		c.until("conversation.item.done", 10*time.Second)
	}

	say("go forward ten meters")
	c.send(event{"type": "response.create"})
	r1 := readResponse(t, c, 2*time.Minute)
	u1 := usageOf(t, r1.done)
	t.Logf("turn 1 (%s): %v", r1.status, u1)
	require.Positive(t, u1["input.text"], "the prompt's tokens")
	require.Zero(t, u1["cached"], "a fresh session has nothing cached")
	require.Zero(t, u1["input.audio"], "a text conversation has no audio")
	require.Positive(t, u1["output.text"])
	require.LessOrEqual(t, u1["output.text"], maxTokens)
	if r1.status == "incomplete" {
		require.Equal(t, maxTokens, u1["output.text"], "cut at max_output_tokens: that many tokens generated")
	}
	sentMs := r1.done.obj("response").obj("omniserve")["audio_sent_ms"].(float64)
	require.Positive(t, sentMs)
	require.Equal(t, int(math.Ceil(sentMs/50)), u1["output.audio"], "one audio token per 50 ms sent")

	say("and then turn left")
	c.send(event{"type": "response.create"})
	r2 := readResponse(t, c, 2*time.Minute)
	u2 := usageOf(t, r2.done)
	t.Logf("turn 2 (%s): %v", r2.status, u2)
	require.Positive(t, u2["cached.text"], "the second turn reads the first from the KV cache")
	if r1.status == "incomplete" {
		// Every token of turn 1, prompt and reply, stayed in the sequence.
		require.Equal(t, u1["input.text"]+u1["output.text"], u2["cached.text"])
	} else {
		require.GreaterOrEqual(t, u2["cached.text"], u1["input.text"])
	}
	require.Greater(t, u2["input.text"], u2["cached.text"], "the new message was prefilled")
	require.Equal(t, u1["output.audio"], u2["input.audio"], "the assistant's audio item is in the context")
	require.Equal(t, u2["input.audio"], u2["cached.audio"], "and was spoken by the previous response")

	// Out of band with its own input: a sequence of its own, nothing cached.
	c.send(event{"type": "response.create", "response": event{"conversation": "none", "output_modalities": []string{"text"},
		"input": []event{{"type": "message", "role": "user", "content": []event{{"type": "input_text", "text": "hello there"}}}}}})
	oob := readResponse(t, c, 2*time.Minute)
	u3 := usageOf(t, oob.done)
	t.Logf("out of band (%s): %v", oob.status, u3)
	require.Positive(t, u3["input.text"])
	require.Zero(t, u3["cached"])
	require.Zero(t, u3["output.audio"], "a text response")
	require.Positive(t, u3["output.text"])

	// Cancelled at once: whatever the engine had done by then (no input at all when it had not
	// read the prompt yet), the usage adds up.
	say("tell me a long story")
	c.send(event{"type": "response.create"})
	c.until("response.created", time.Minute)
	c.send(event{"type": "response.cancel"})
	done, _ := c.until("response.done", time.Minute)
	require.Equal(t, "cancelled", done.obj("response").str("status"))
	t.Logf("cancelled: %v", usageOf(t, done))
}
