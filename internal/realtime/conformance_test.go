package realtime_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

// TestAppendSizesSameTranscript: the same speech sent in 20 ms, 100 ms, 1 s, 5 s and one
// whole-file append reaches the ASR complete every time (accepted audio is never dropped).
func TestAppendSizesSameTranscript(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{}, nil)
	utterance := append(append([]byte{}, goForward(t)...), silence(3000)...)
	var first string
	for _, chunkMs := range []int{20, 100, 1000, 5000, len(utterance) / bytesPerMs} {
		c := dial(t, srv.url, nil)
		c.update(event{"turn_detection": nil})
		c.appendAudio(utterance, chunkMs, false)
		c.send(event{"type": "input_audio_buffer.commit"})
		tr, _ := c.until("conversation.item.input_audio_transcription.completed", 60*time.Second)
		got := tr.str("transcript")
		t.Logf("%d ms appends: %q", chunkMs, got)
		require.Contains(t, strings.ToLower(got), "forward", "%d ms appends", chunkMs)
		if first == "" {
			first = got
		}
		require.Equal(t, first, got, "%d ms appends", chunkMs)
		c.close()
	}
}

// TestTextItemEvents: a text item gets conversation.item.added and one conversation.item.done,
// with the client's id and previous_item_id, and no transcription event.
func TestTextItemEvents(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{}, nil)
	c := dial(t, srv.url, nil)
	c.update(event{"turn_detection": nil})
	c.send(event{"type": "conversation.item.create", "item": event{"id": "item_a", "type": "message", "role": "user",
		"content": []event{{"type": "input_text", "text": "hello"}}}})
	c.send(event{"type": "conversation.item.create", "previous_item_id": "root", "item": event{"id": "item_b", "type": "message",
		"role": "system", "content": []event{{"type": "input_text", "text": "be brief"}}}})
	c.send(event{"type": "session.heartbeat"})
	_, seen := c.until("session.heartbeat_ack", 10*time.Second)
	var types []string
	for _, e := range seen {
		types = append(types, e.str("type"))
		if e.str("type") == "conversation.item.added" && e.obj("item").str("id") == "item_b" {
			require.Nil(t, e["previous_item_id"], "root: first in the conversation")
		}
		if e.str("type") == "conversation.item.added" && e.obj("item").str("id") == "item_a" {
			require.Nil(t, e["previous_item_id"])
		}
	}
	require.Equal(t, []string{"conversation.item.added", "conversation.item.done", "conversation.item.added", "conversation.item.done"}, types)
	// An item created after both follows the last one.
	c.send(event{"type": "conversation.item.create", "item": event{"id": "item_c", "type": "message", "role": "user",
		"content": []event{{"type": "input_text", "text": "again"}}}})
	added, _ := c.until("conversation.item.added", 10*time.Second)
	require.Equal(t, "item_a", added.str("previous_item_id"))
}

// TestBetaDialect: OpenAI-Beta: realtime=v1 gets the beta session shape and beta event names.
func TestBetaDialect(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{}, nil)
	c := dial(t, srv.url, &websocket.DialOptions{HTTPHeader: http.Header{"OpenAI-Beta": {"realtime=v1"}}})
	created, _ := c.until("session.created", 10*time.Second)
	s := created.obj("session")
	require.Equal(t, "pcm16", s.str("input_audio_format"))
	require.Equal(t, []any{"text", "audio"}, s["modalities"])
	require.Equal(t, "server_vad", s.obj("turn_detection").str("type"))
	require.Nil(t, s["type"], "beta sessions have no type")
	c.update2(event{"turn_detection": nil, "max_response_output_tokens": 4})
	c.appendAudio(goForward(t), 200, false)
	c.send(event{"type": "input_audio_buffer.commit", "response_create": true})
	done, seen := c.until("response.done", 60*time.Second)
	counts := map[string]int{}
	for _, e := range seen {
		counts[e.str("type")]++
	}
	require.Positive(t, counts["conversation.item.created"])
	require.Positive(t, counts["response.audio.delta"])
	require.Positive(t, counts["response.audio_transcript.delta"])
	require.Equal(t, 1, counts["response.audio.done"])
	require.Equal(t, 1, counts["response.audio_transcript.done"])
	for _, ga := range []string{"conversation.item.added", "conversation.item.done", "response.output_audio.delta", "response.output_audio_transcript.delta"} {
		require.Zero(t, counts[ga], ga)
	}
	require.Equal(t, "audio", done.obj("response")["output"].([]any)[0].(map[string]any)["content"].([]any)[0].(map[string]any)["type"])
	require.NotNil(t, done.obj("response")["usage"])
}

// TestIdleTimeout: with turn_detection.idle_timeout_ms the server follows up when the user stays
// silent after a response: input_audio_buffer.timeout_triggered, then a response.
func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{}, nil)
	c := dial(t, srv.url, nil)
	c.update(event{"type": "realtime", "max_output_tokens": 3, "audio": event{"input": event{"turn_detection": event{
		"type": "server_vad", "idle_timeout_ms": 5000}}}})
	c.appendAudio(goForward(t), 200, false)
	c.appendAudio(silence(1000), 200, false)
	first := readResponse(t, c, 60*time.Second)
	t0 := time.Now()
	// A client streams its microphone all along: the silence after the reply, in real time
	// (the reply's audio came at once: MaxOutputLead is a minute here, so it "plays" during
	// this too). 9 s covers the reply's playback and the 5 s timeout.
	c.appendAudio(silence(9000), 100, true)
	trig, _ := c.until("input_audio_buffer.timeout_triggered", 30*time.Second)
	require.GreaterOrEqual(t, time.Since(t0), 4*time.Second, "the clock starts at response.done")
	require.NotEmpty(t, trig.str("item_id"))
	// The segment is the silence after the reply finished playing, roughly the timeout.
	span := trig["audio_end_ms"].(float64) - trig["audio_start_ms"].(float64)
	t.Logf("timeout_triggered audio_start_ms %v audio_end_ms %v (span %v ms)", trig["audio_start_ms"], trig["audio_end_ms"], span)
	require.InDelta(t, 5000, span, 600, "audio_end_ms - audio_start_ms")
	second := readResponse(t, c, 60*time.Second)
	require.NotEqual(t, first.id, second.id)
}
