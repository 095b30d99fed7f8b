package test

import (
	"encoding/base64"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDummyReplyEndsItself: the dummy model ends its replies as a real model does, with its
// end-of-sequence token after a length drawn from the conversation (8 to 32 words,
// internal/gpu/dummyend.go): chat answers finish_reason "stop" and realtime "completed", with a
// few seconds of audio, although the limit (256 tokens in chat, none in realtime) is far; the same
// conversation gives the same length. Before, every dummy reply ran to its limit.
func TestDummyReplyEndsItself(t *testing.T) {
	t.Parallel()
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	const maxWords = 32 // internal/gpu's dummyReplyMax

	t.Run("chat", func(t *testing.T) {
		var lengths []int
		for range 2 {
			c := completeJSON(t, "http://"+s.addr+"/v1", map[string]any{"model": "dummy:tiny",
				"messages": userText("How was your day?"), "max_tokens": 256})
			require.Equal(t, "stop", c.Choices[0].FinishReason)
			require.NotEmpty(t, *c.Choices[0].Message.Content)
			require.LessOrEqual(t, c.Usage.CompletionTokens, maxWords+1, "the words and the end token")
			lengths = append(lengths, c.Usage.CompletionTokens)
			t.Logf("reply: %d completion tokens: %q", c.Usage.CompletionTokens, *c.Choices[0].Message.Content)
		}
		require.Equal(t, lengths[0], lengths[1], "the same conversation, the same length (fresh random words)")
	})

	t.Run("realtime", func(t *testing.T) {
		var words []float64
		for range 2 {
			c := dialRT(t, s, map[string]any{"turn_detection": nil, "modalities": []string{"audio"}})
			c.send(t, map[string]any{"type": "conversation.item.create", "item": map[string]any{"type": "message",
				"role": "user", "content": []map[string]any{{"type": "input_text", "text": "How was your day?"}}}})
			c.until(t, "conversation.item.done", 10*time.Second)
			c.send(t, map[string]any{"type": "response.create"})
			var pcm int
			var done map[string]any
			for _, ev := range c.collectUntil(t, "response.done", 2*time.Minute) {
				switch ev["type"] {
				case "response.output_audio.delta":
					b, err := base64.StdEncoding.DecodeString(ev["delta"].(string))
					require.NoError(t, err)
					pcm += len(b)
				case "response.done":
					done = ev
				}
			}
			resp := done["response"].(map[string]any)
			require.Equal(t, "completed", resp["status"], "%v", resp)
			secs := float64(pcm) / 2 / 24000 // pcm16 at OpenAI's 24 kHz
			require.Greater(t, secs, 0.5, "the reply is spoken")
			require.Less(t, secs, 15.0, "a few seconds of audio: %d words at most", maxWords)
			out := resp["usage"].(map[string]any)["output_token_details"].(map[string]any)["text_tokens"].(float64)
			require.LessOrEqual(t, out, float64(maxWords+1), "the words and the end token")
			t.Logf("reply: %.0f text tokens, %.2f s of audio", out, secs)
			words = append(words, out)
			c.close(t)
		}
		require.Equal(t, words[0], words[1], "the same conversation, the same length")
	})
}
