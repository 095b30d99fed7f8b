package test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRealtimeReplyWithoutNewInput: a response.create before the user has said anything (LiveKit's
// generate_reply("Greet the user.")) and a second one after a reply, with nothing new committed,
// each get a reply from the conversation as it stands, as OpenAI's API gives one. At 7161a1b both
// were refused with response_create_without_input.
func TestRealtimeReplyWithoutNewInput(t *testing.T) {
	t.Parallel()
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	for _, modalities := range [][]string{{"text"}, {"audio"}} {
		t.Run(modalities[0], func(t *testing.T) {
			c := dialRT(t, s, map[string]any{"turn_detection": nil, "modalities": modalities})
			defer c.close(t)
			for i, instructions := range []string{"Greet the user.", "Say it again, differently."} {
				c.send(t, map[string]any{"type": "response.create", "event_id": "greet", "response": map[string]any{
					"instructions": instructions, "max_output_tokens": 12}})
				created := c.until(t, "response.created", 30*time.Second)
				id, _ := created["response"].(map[string]any)["id"].(string)
				require.NotEmpty(t, id)
				done := c.until(t, "response.done", 2*time.Minute)
				resp := done["response"].(map[string]any)
				require.Equal(t, id, resp["id"])
				require.Contains(t, []string{"completed", "incomplete"}, resp["status"], "reply %d: %v", i, resp)
				out, _ := resp["output"].([]any)
				require.Len(t, out, 1, "reply %d has its assistant item: %v", i, resp)
				require.Equal(t, "assistant", out[0].(map[string]any)["role"])
			}
			c.requireStillServes(t)
		})
	}
}
