package realtime_test

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime"
	"github.com/omniserve/omniserve/internal/session"
)

// responseOutcome reads one response from response.created to response.done.
type responseOutcome struct {
	id         string
	status     string
	reason     string
	audioBytes int
	deltas     int
	transcript strings.Builder
	text       strings.Builder
	done       event
	before     []event
}

func readResponse(t *testing.T, c *wsClient, timeout time.Duration) *responseOutcome {
	t.Helper()
	created, before := c.until("response.created", timeout)
	out := &responseOutcome{id: created.obj("response").str("id"), before: before}
	require.True(t, strings.HasPrefix(out.id, "resp-duplex-"), out.id)
	deadline := time.Now().Add(timeout)
	for {
		e, ok := c.next(time.Until(deadline))
		require.True(t, ok, "no response.done for %s", out.id)
		switch e.str("type") {
		case "response.output_audio.delta":
			require.Equal(t, out.id, e.str("response_id"))
			require.EqualValues(t, 24000, e["sample_rate_hz"])
			b, err := base64.StdEncoding.DecodeString(e.str("delta"))
			require.NoError(t, err)
			require.Zero(t, len(b)%2, "pcm16 delta has whole samples")
			out.audioBytes += len(b)
			out.deltas++
			pair, ok := c.next(5 * time.Second)
			require.True(t, ok)
			require.Equal(t, "response.output_audio_transcript.delta", pair.str("type"), "audio delta is paired with its transcript delta")
			out.transcript.WriteString(pair.str("delta"))
		case "response.output_text.delta":
			out.text.WriteString(e.str("delta"))
		case "response.done":
			r := e.obj("response")
			out.status = r.str("status")
			out.reason = r.obj("status_details").str("reason")
			out.done = e
			return out
		}
	}
}

// requireNaturalEnd accepts a response that ran to its end: completed, or incomplete because it
// reached the max_response_output_tokens the test set (the random-weight dummy model rarely
// emits an end token). Cancelled and failed responses fail the test.
func requireNaturalEnd(t *testing.T, out *responseOutcome) {
	t.Helper()
	if out.status == "incomplete" {
		require.Equal(t, "max_output_tokens", out.reason)
		return
	}
	require.Equal(t, "completed", out.status, "a turn that was not cut by max_output_tokens must complete")
}

func TestResponseRequiredTurn(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{}, nil)
	c := dial(t, srv.url, nil)
	created := c.update(event{"turn_detection": nil, "max_response_output_tokens": 8})
	require.True(t, strings.HasPrefix(created.obj("session").str("id"), "duplex-"))
	c.appendAudio(goForward(t), 100, false)
	c.send(event{"type": "input_audio_buffer.commit"})
	c.until("input_audio_buffer.committed", 10*time.Second)
	tr, _ := c.until("conversation.item.input_audio_transcription.completed", 30*time.Second)
	require.Contains(t, strings.ToLower(tr.str("transcript")), "forward")
	c.send(event{"type": "response.create"})
	out := readResponse(t, c, 60*time.Second)
	requireNaturalEnd(t, out)
	require.Positive(t, out.deltas)
	require.Positive(t, out.audioBytes)
	require.NotEmpty(t, strings.TrimSpace(out.transcript.String()))
	srv.waitSlots(t, 1)
}

func TestResponseRequiredTextOnly(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{}, nil)
	c := dial(t, srv.url, nil)
	c.update(event{"modalities": []string{"text"}, "max_response_output_tokens": 6, "turn_detection": nil})
	c.appendAudio(goForward(t), 200, false)
	c.send(event{"type": "input_audio_buffer.commit", "response_create": true})
	out := readResponse(t, c, 60*time.Second)
	requireNaturalEnd(t, out)
	require.Zero(t, out.deltas)
	require.NotEmpty(t, strings.TrimSpace(out.text.String()))
}

func TestAutoResponseTurn(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{}, nil)
	c := dial(t, srv.url+"?duplex=1", nil)
	c.update(event{"extra_body": event{"auto_response": true}, "max_response_output_tokens": 8,
		"turn_detection": event{"type": "server_vad", "silence_duration_ms": 500}})

	// Silence only: the pipeline listens and never answers; ?duplex=1 (vllm-omni's dialect) tells
	// it once per unit (1 s) of audio, not once per append.
	c.appendAudio(silence(3000), 100, false)
	for i := 0; i < 3; i++ {
		e, _ := c.until("response.listen", 10*time.Second)
		require.Equal(t, "listening", e.obj("response").str("status"))
		require.Equal(t, "model_listen", e.obj("response").obj("metadata").str("reason"))
	}
	if e, ok := c.next(300 * time.Millisecond); ok {
		require.NotEqual(t, "response.created", e.str("type"))
	}

	// Speech then silence: a response without any commit.
	c.appendAudio(goForward(t), 100, false)
	c.appendAudio(silence(1200), 100, false)
	tr, _ := c.until("conversation.item.input_audio_transcription.completed", 30*time.Second)
	require.Contains(t, strings.ToLower(tr.str("transcript")), "forward")
	out := readResponse(t, c, 60*time.Second)
	requireNaturalEnd(t, out)
	require.Positive(t, out.audioBytes)
}

// TestServerVADBargeIn is OpenAI's server_vad flow with its defaults (create_response and
// interrupt_response true): speech then silence takes the turn (speech_started / speech_stopped
// with positions and the item id, committed, a response), speech during the response interrupts
// it (output_audio_buffer.cleared, response.done cancelled / turn_detected, the assistant item
// truncated to what was played), and the interrupting speech becomes the next turn.
func TestServerVADBargeIn(t *testing.T) {
	t.Parallel()
	// Default pacing (500 ms lead): the response plays at real time, so speech can interrupt it.
	srv := newServer(t, session.ManagerConfig{MaxOutputLead: 500 * time.Millisecond}, realtime.HandlerConfig{}, nil)
	c := dial(t, srv.url, nil)
	created, _ := c.until("session.created", 10*time.Second)
	td := created.obj("session").obj("audio").obj("input").obj("turn_detection")
	require.Equal(t, "server_vad", td.str("type"))
	require.Equal(t, true, td["create_response"])
	require.Equal(t, true, td["interrupt_response"])
	c.update2(event{"type": "realtime", "max_output_tokens": 40})
	speechBytes := goForward(t)
	c.appendAudio(speechBytes, 100, false)
	c.appendAudio(silence(1000), 100, false)
	started, _ := c.until("input_audio_buffer.speech_started", 30*time.Second)
	stopped, _ := c.until("input_audio_buffer.speech_stopped", 30*time.Second)
	committed, _ := c.until("input_audio_buffer.committed", 30*time.Second)
	userItem := started.str("item_id")
	require.NotEmpty(t, userItem)
	require.Equal(t, userItem, stopped.str("item_id"))
	require.Equal(t, userItem, committed.str("item_id"))
	require.Nil(t, committed["previous_item_id"])
	speechMs := float64(len(speechBytes) / bytesPerMs)
	start, end := started["audio_start_ms"].(float64), stopped["audio_end_ms"].(float64)
	require.Greater(t, start, 0.0)
	require.Greater(t, end, start+500)
	require.LessOrEqual(t, end, speechMs+1000)
	resp, _ := c.until("response.created", 30*time.Second)
	rid := resp.obj("response").str("id")
	added, _ := c.until("response.output_item.added", 10*time.Second)
	asstItem := added.obj("item").str("id")
	c.until("response.output_audio.delta", 60*time.Second)

	// The user talks over the assistant.
	c.appendAudio(speechBytes, 100, false)
	done, before := c.until("response.done", 30*time.Second)
	require.Equal(t, rid, done.str("response_id"))
	require.Equal(t, "cancelled", done.obj("response").str("status"))
	require.Equal(t, "turn_detected", done.obj("response").obj("status_details").str("reason"))
	var cleared event
	for _, e := range before {
		if e.str("type") == "output_audio_buffer.cleared" {
			cleared = e
		}
	}
	require.NotNil(t, cleared, "output_audio_buffer.cleared before response.done")
	require.Equal(t, rid, cleared.str("response_id"))
	played := cleared["audio_end_ms"].(float64)
	sent := done.obj("response").obj("omniserve")["audio_sent_ms"].(float64)
	require.LessOrEqual(t, played, sent, "the item keeps only what was played")
	require.NotNil(t, done.obj("response")["usage"])
	c.update2(event{"max_output_tokens": 4}) // the next answer is short: it plays at real time

	// The interrupting speech is the next turn: it commits after the assistant item.
	c.appendAudio(silence(1000), 100, false)
	committed2, _ := c.until("input_audio_buffer.committed", 30*time.Second)
	require.Equal(t, asstItem, committed2.str("previous_item_id"))
	out := readResponse(t, c, 60*time.Second)
	require.NotEqual(t, rid, out.id)
	c.send(event{"type": "conversation.item.retrieve", "item_id": asstItem})
	got, _ := c.until("conversation.item.retrieved", 10*time.Second)
	require.Equal(t, "incomplete", got.obj("item").str("status"))
	require.Equal(t, "output_audio", got.obj("item")["content"].([]any)[0].(map[string]any)["type"])
	e0 := resp.obj("response").obj("omniserve")["epoch"].(float64)
	e1 := out.done.obj("response").obj("omniserve")["epoch"].(float64)
	require.Greater(t, e1, e0)
}

func TestCancelsDuringResponse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		ev     event
		reason string
		extra  string
	}{
		{"response.cancel", event{"type": "response.cancel"}, "client_cancelled", ""},
		{"input.cancel", event{"type": "input.cancel"}, "barge_in", "input_audio_buffer.cleared"},
		{"output_audio_buffer.clear", event{"type": "output_audio_buffer.clear"}, "output_audio_buffer_clear", "output_audio_buffer.cleared"},
		{"barge_in", event{"type": "barge_in"}, "barge_in", "overlap.decision"},
	}
	srv := newServer(t, session.ManagerConfig{MaxOutputLead: 300 * time.Millisecond}, realtime.HandlerConfig{}, nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, srv.url+"?duplex=1", nil)
			c.update(event{"turn_detection": nil, "max_response_output_tokens": 40})
			c.appendAudio(goForward(t), 200, false)
			c.send(event{"type": "input_audio_buffer.commit", "response_create": true})
			c.until("response.output_audio.delta", 60*time.Second)
			c.send(tc.ev)
			done, before := c.until("response.done", 10*time.Second)
			require.Equal(t, "cancelled", done.obj("response").str("status"))
			require.Equal(t, tc.reason, done.obj("response").obj("status_details").str("reason"))
			if tc.extra != "" {
				found := false
				for _, e := range before {
					found = found || e.str("type") == tc.extra
				}
				require.True(t, found, "%s before response.done", tc.extra)
			}
			c.send(event{"type": "session.close"})
			closed, _ := c.until("session.closed", 10*time.Second)
			require.Equal(t, "client_close", closed.str("reason"))
		})
	}
	srv.waitSlots(t, 0)
}

// TestCancelRightAfterCreate: a response.cancel sent right behind response.create (before the
// engine started anything) still lets the client see the response's whole lifecycle:
// response.created before its response.done, never a done for a response it never saw.
func TestCancelRightAfterCreate(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, realtime.HandlerConfig{}, nil)
	c := dial(t, srv.url+"?duplex=1", nil)
	c.update(event{"turn_detection": nil, "max_response_output_tokens": 40})
	for range 5 {
		c.send(event{"type": "conversation.item.create", "item": event{"type": "message", "role": "user",
			"content": []event{{"type": "input_text", "text": "tell me about the robot"}}}})
		c.send(event{"type": "response.create"})
		c.send(event{"type": "response.cancel"})
		done, before := c.until("response.done", 30*time.Second)
		rid := done.obj("response").str("id")
		created := false
		for _, e := range before {
			created = created || (e.str("type") == "response.created" && e.obj("response").str("id") == rid)
		}
		require.True(t, created, "response.created of %s before its response.done", rid)
	}
	c.send(event{"type": "session.close"})
	c.until("session.closed", 10*time.Second)
}
