package realtime

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	srv := newServer(t, session.ManagerConfig{}, HandlerConfig{}, nil)
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
	srv := newServer(t, session.ManagerConfig{}, HandlerConfig{}, nil)
	c := dial(t, srv.url, nil)
	c.update(event{"modalities": []string{"text"}, "max_response_output_tokens": 6})
	c.appendAudio(goForward(t), 200, false)
	c.send(event{"type": "input_audio_buffer.commit", "response_create": true})
	out := readResponse(t, c, 60*time.Second)
	requireNaturalEnd(t, out)
	require.Zero(t, out.deltas)
	require.NotEmpty(t, strings.TrimSpace(out.text.String()))
}

func TestAutoResponseTurn(t *testing.T) {
	t.Parallel()
	srv := newServer(t, session.ManagerConfig{}, HandlerConfig{}, nil)
	c := dial(t, srv.url+"?duplex=1", nil)
	c.update(event{"extra_body": event{"auto_response": true}, "max_response_output_tokens": 8,
		"turn_detection": event{"type": "server_vad", "silence_duration_ms": 500}})

	// Silence only: the pipeline listens and never answers.
	c.appendAudio(silence(1000), 100, false)
	for i := 0; i < 10; i++ {
		e, _ := c.until("response.listen", 10*time.Second)
		require.Equal(t, "listening", e.obj("response").str("status"))
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

func TestBargeIn(t *testing.T) {
	t.Parallel()
	// Default pacing (500 ms lead): the response plays at real time, so speech can interrupt it.
	srv := newServer(t, session.ManagerConfig{MaxOutputLead: 500 * time.Millisecond}, HandlerConfig{}, nil)
	c := dial(t, srv.url+"?duplex=1", nil)
	c.update(event{"turn_detection": event{"type": "server_vad"}, "max_response_output_tokens": 40})
	c.appendAudio(goForward(t), 100, false)
	c.send(event{"type": "input_audio_buffer.commit", "response_create": true})
	created, _ := c.until("response.created", 30*time.Second)
	rid := created.obj("response").str("id")
	epoch0, _ := created.obj("response").obj("metadata")["epoch"].(float64)
	c.until("response.output_audio.delta", 60*time.Second)

	// The user talks over the assistant.
	c.appendAudio(goForward(t)[16000:48000], 100, false)
	var done event
	for {
		e, ok := c.next(10 * time.Second)
		require.True(t, ok, "no response.done after barge-in")
		if e.str("type") == "response.done" {
			done = e
			break
		}
	}
	require.Equal(t, rid, done.str("response_id"))
	require.Equal(t, "cancelled", done.obj("response").str("status"))
	require.Equal(t, "turn_detected", done.obj("response").obj("status_details").str("reason"))
	// Nothing of the old response after its terminal event.
	c.send(event{"type": "session.heartbeat"})
	for {
		e, ok := c.next(5 * time.Second)
		require.True(t, ok)
		if e.str("type") == "session.heartbeat_ack" {
			break
		}
		require.NotEqual(t, "response.output_audio.delta", e.str("type"), "old audio after response.done")
	}
	// The next turn works, in a later epoch (short, as it plays at real time).
	c.update2(event{"max_response_output_tokens": 4})
	c.send(event{"type": "input_audio_buffer.commit", "response_create": true})
	out := readResponse(t, c, 60*time.Second)
	require.NotEqual(t, rid, out.id)
	epoch1, _ := out.done.obj("response").obj("metadata")["epoch"].(float64)
	require.Greater(t, epoch1, epoch0)
	requireNaturalEnd(t, out)
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
	srv := newServer(t, session.ManagerConfig{MaxOutputLead: 300 * time.Millisecond}, HandlerConfig{}, nil)
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
