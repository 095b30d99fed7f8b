package test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// vllm-omni's commit during a response (docs/REALTIME.md "vllm-omni duplex dialect", the commit
// outcomes): what the user said over the answer decides. Up to overlap_short_ack_ms (700) of
// speech is an acknowledgement: committed as empty, overlap_ack, no_response, and the answer goes
// on with nothing to follow it. Longer speech (short of the 1200 ms that cut the answer) is a
// turn of its own: committed with response_create_deferred, answered after the answer that runs.

// pocketsphinxRaw is a 16 kHz PCM16 clip of pocketsphinx's test data from second from to to.
func pocketsphinxRaw(t *testing.T, name string, from, to float64) []byte {
	t.Helper()
	raw, err := os.ReadFile("/usr/share/pocketsphinx/test/data/" + name)
	require.NoError(t, err, "install pocketsphinx-testdata")
	return raw[int(from*16000)*2 : int(to*16000)*2]
}

// answering opens a vllm-omni session with the MiniCPM-o preset, asks the question the
// barge-in example asks (committed with response_create false: the engine decides) and
// returns once the long answer speaks.
func answering(t *testing.T) (*ackClient, string) {
	t.Helper()
	s := startDuplexBinary(t)
	session := duplexClientSession()
	session["max_response_output_tokens"] = 256 // an answer that is still playing when the user talks
	c, _ := openVLLM(t, s, session)
	appendPCM(t, c, goForwardSpoken(t), nil)
	c.send(t, map[string]any{"type": "input_audio_buffer.commit", "final": true, "response_create": false})
	c.until(t, "input_audio_buffer.committed", 30*time.Second)
	first := c.until(t, "response.created", time.Minute)["response"].(map[string]any)["id"].(string)
	c.until(t, "response.speak", 30*time.Second)
	return c, first
}

// none reads c's events for d and fails on an event of type typ (or an error).
func none(t *testing.T, c *ackClient, typ string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case ev, ok := <-c.events:
			require.True(t, ok, "the connection ended: %v", c.readErr)
			require.NotEqual(t, typ, ev["type"], "%v", ev)
			require.NotEqual(t, "error", ev["type"], "%v", ev["error"])
		case <-deadline:
			return
		}
	}
}

// "Go for-" (0.6 s of speech) said over the answer and committed: an acknowledgement. The
// answer plays to its end, no response answers the remark (the engine forgot its audio), and its
// user item is empty. The next utterance is answered without it.
func TestVLLMShortOverlapIsAnAcknowledgement(t *testing.T) {
	t.Parallel()
	c, first := answering(t)
	appendPCM(t, c, pocketsphinxRaw(t, "goforward.raw", 0.35, 1.15), nil)
	c.send(t, map[string]any{"type": "input_audio_buffer.commit", "final": true, "response_create": false})
	committed := c.until(t, "input_audio_buffer.committed", 30*time.Second)
	ev := committed["event"].(map[string]any)
	require.Equal(t, "input.committed", ev["type"])
	for _, flag := range []string{"empty", "overlap_ack", "no_response"} {
		require.Equal(t, true, ev[flag], "committed event %v: %s", ev, flag)
	}
	require.Nil(t, ev["response_create_deferred"])
	item := c.until(t, "conversation.item.created", 10*time.Second)["item"].(map[string]any)
	require.Equal(t, committed["item_id"], item["id"])
	require.Equal(t, "user", item["role"])

	done := c.until(t, "response.done", time.Minute)["response"].(map[string]any)
	require.Equal(t, first, done["id"])
	require.Equal(t, "completed", done["status"], "the answer goes on")
	none(t, c, "response.created", 4*time.Second) // nothing answers the acknowledgement
	require.Len(t, c.seen("response.created"), 1)
	require.Empty(t, c.seen("overlap.decision"), "no barge-in")

	// The next utterance, with no audio between (the remark's speech segment goes on), is heard
	// and answered, and its transcript does not carry the remark.
	appendPCM(t, c, pocketsphinxRaw(t, "numbers.raw", 0.45, 2.5), nil)
	c.send(t, map[string]any{"type": "input_audio_buffer.commit", "final": true, "response_create": false})
	next := c.until(t, "input_audio_buffer.committed", 30*time.Second)
	require.Nil(t, next["event"].(map[string]any)["empty"], "the utterance was heard")
	var tr map[string]any
	for tr == nil || tr["item_id"] != next["item_id"] {
		tr = c.until(t, "conversation.item.input_audio_transcription.completed", 30*time.Second)
	}
	words := strings.Fields(strings.ToLower(tr["transcript"].(string)))
	require.NotEmpty(t, words)
	require.NotContains(t, words, "go", "transcript %v carries the acknowledgement", words)
	c.until(t, "response.created", time.Minute)
	require.Zero(t, c.typesSeen()["error"], "no error: the clients raise on any")
}

// "One two three" (1.1 s of speech) said over the answer and committed: a turn of its own,
// committed with response_create_deferred and its transcript, answered once the answer that
// runs is over (not cut: the speech is short of overlap_barge_in_ms).
func TestVLLMLongerOverlapIsAnsweredAfterTheResponse(t *testing.T) {
	t.Parallel()
	c, first := answering(t)
	appendPCM(t, c, pocketsphinxRaw(t, "numbers.raw", 0.45, 1.55), nil)
	c.send(t, map[string]any{"type": "input_audio_buffer.commit", "final": true, "response_create": false})
	committed := c.until(t, "input_audio_buffer.committed", 30*time.Second)
	ev := committed["event"].(map[string]any)
	require.Equal(t, true, ev["response_create_deferred"], "committed event %v", ev)
	require.Nil(t, ev["overlap_ack"])
	require.Nil(t, ev["empty"])

	done := c.until(t, "response.done", time.Minute)["response"].(map[string]any)
	require.Equal(t, first, done["id"])
	require.Equal(t, "completed", done["status"], "the answer is not cut")
	second := c.until(t, "response.created", 30*time.Second)["response"].(map[string]any)["id"].(string)
	require.NotEqual(t, first, second, "the remark is answered after the answer")
	require.Equal(t, second, c.until(t, "response.done", time.Minute)["response"].(map[string]any)["id"])
	require.Empty(t, c.seen("overlap.decision"), "no barge-in")
	require.Zero(t, c.typesSeen()["error"], "no error: the clients raise on any")
}
