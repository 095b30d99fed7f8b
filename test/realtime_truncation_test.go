package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// TestRealtimeTruncation drives each session.truncation mode on the real binary with a small
// context window (engine.seq_context 768 tokens) through many text turns over the GA WebSocket:
//
//   - retention_ratio and "auto": the oldest turns' items are deleted, each announced with
//     conversation.item.deleted (reason "truncation"), oldest first, a few at a time (not on every
//     turn), never the newest ones; deleted items are gone (retrieve fails) and every turn is
//     answered;
//   - "disabled": nothing is deleted, and once the conversation no longer fits, the response fails
//     with context_length_exceeded naming the window, as an error event and response.done
//     failed; later turns fail the same way.
//
// session.updated echoes the setting in OpenAI's shape.
func TestRealtimeTruncation(t *testing.T) {
	t.Parallel()
	s := startBinaryEnv(t, []string{"OMNISERVE_SEQ_CONTEXT=768"}, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	tests := []struct {
		name       string
		truncation any
		turns      int
	}{
		{"retention_ratio", map[string]any{"type": "retention_ratio", "retention_ratio": 0.5, "token_limits": map[string]any{"post_instructions": 240}}, 24},
		{"auto", "auto", 30},
		{"disabled", "disabled", 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialGA(t, s)
			defer c.close(t)
			got := c.update(t, map[string]any{"type": "realtime", "output_modalities": []string{"text"}, "max_output_tokens": 16,
				"instructions": "You are a robot that drives where it is told.", "truncation": tt.truncation,
				"audio": map[string]any{"input": map[string]any{"turn_detection": nil}}})
			require.JSONEq(t, mustJSON(t, tt.truncation), mustJSON(t, got["truncation"]), "session.updated echoes truncation")
			h := truncationHistory{}
			for i := range tt.turns {
				h.turn(t, c, fmt.Sprintf("turn %d: go forward ten meters and then turn left at the second corner please", i+1))
			}
			if tt.name == "disabled" {
				require.Empty(t, h.deleted, "truncation disabled deletes nothing")
				require.Positive(t, h.failed, "the turns past the window fail")
				require.Equal(t, tt.turns, h.completed+h.failed)
				require.Equal(t, h.failed, h.contextErrors, "each failed turn has its context_length_exceeded error")
				require.Contains(t, h.lastError, "maximum context length is 768 tokens")
				require.Contains(t, h.lastError, "truncation is disabled")
				require.True(t, h.failedAfterFirstFailure, "a conversation past the window stays past it")
				return
			}
			require.Zero(t, h.failed, "every turn is answered")
			require.NotEmpty(t, h.deleted, "the conversation outgrew the window")
			require.Less(t, h.dropTurns, tt.turns/2, "items go a few turns at a time, not on every turn")
			// Deleted items are the oldest, in order, and the newest ones stay.
			require.Equal(t, h.added[:len(h.deleted)], h.deleted)
			require.Greater(t, len(h.added)-len(h.deleted), 2)
			c.send(t, map[string]any{"type": "conversation.item.retrieve", "item_id": h.deleted[0]})
			e := c.nextError(t, 30*time.Second)
			require.Equal(t, "item_retrieve_invalid_item_id", e["code"])
			c.requireStillServes(t)
		})
	}
}

// TestRealtimeTruncationSpokenTurns: spoken turns (goforward.raw appended faster than real time,
// committed, answered with audio) past a retention_ratio budget: the oldest turns' items, user
// audio items among them, are deleted with reason "truncation" and every turn is answered with
// audio and its input transcript.
func TestRealtimeTruncationSpokenTurns(t *testing.T) {
	t.Parallel()
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--cache-dir", filepath.Join(t.TempDir(), "cache"))
	pcm, err := os.ReadFile(goForwardRaw)
	require.NoError(t, err)
	c := dialGA(t, s)
	defer c.close(t)
	c.update(t, map[string]any{"type": "realtime", "output_modalities": []string{"audio"}, "max_output_tokens": 6,
		"truncation": map[string]any{"type": "retention_ratio", "retention_ratio": 0.3, "token_limits": map[string]any{"post_instructions": 60}},
		"audio":      map[string]any{"input": map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 16000}, "turn_detection": nil}}})
	var audioItems, deleted []string
	for i := range 10 {
		c.stream(t, pcm, 0)
		c.send(t, map[string]any{"type": "input_audio_buffer.commit"})
		c.send(t, map[string]any{"type": "response.create"})
		sawAudio := false
		for _, ev := range c.collectUntil(t, "response.done", 2*time.Minute) {
			switch ev["type"] {
			case "input_audio_buffer.committed":
				audioItems = append(audioItems, ev["item_id"].(string))
			case "conversation.item.deleted":
				require.Equal(t, "truncation", ev["reason"])
				deleted = append(deleted, ev["item_id"].(string))
			case "response.output_audio.delta":
				sawAudio = true
			case "error":
				t.Fatalf("turn %d: %v", i+1, ev["error"])
			case "response.done":
				require.Contains(t, []string{"completed", "incomplete"}, status(ev), "turn %d", i+1)
			}
		}
		require.True(t, sawAudio, "turn %d is answered with audio", i+1)
	}
	require.NotEmpty(t, deleted, "the spoken conversation outgrew its 60-token budget")
	require.Contains(t, deleted, audioItems[0], "the first spoken item went first")
	require.NotContains(t, deleted, audioItems[len(audioItems)-1], "the newest turn stays")
}

// truncationHistory is what a truncation test saw over its turns.
type truncationHistory struct {
	added, deleted          []string // item ids, in order
	completed, failed       int
	contextErrors           int
	lastError               string
	dropTurns               int // turns in which items were deleted
	failedAfterFirstFailure bool
}

// turn sends a user text item and a response.create and reads everything up to response.done.
func (h *truncationHistory) turn(t *testing.T, c *rtClient, text string) {
	t.Helper()
	c.send(t, textItem(text))
	c.send(t, map[string]any{"type": "response.create"})
	dropped := false
	for _, ev := range c.collectUntil(t, "response.done", 2*time.Minute) {
		switch ev["type"] {
		case "conversation.item.added":
			item, _ := ev["item"].(map[string]any)
			h.added = append(h.added, item["id"].(string))
		case "conversation.item.deleted":
			require.Equal(t, "truncation", ev["reason"], "%v", ev)
			h.deleted = append(h.deleted, ev["item_id"].(string))
			dropped = true
		case "error":
			e, _ := ev["error"].(map[string]any)
			require.Equal(t, "context_length_exceeded", e["code"], "%v", e)
			h.contextErrors++
			h.lastError, _ = e["message"].(string)
		case "response.done":
			switch status(ev) {
			case "completed", "incomplete":
				h.completed++
			case "failed":
				h.failedAfterFirstFailure = h.failed > 0
				h.failed++
			default:
				t.Fatalf("response ended %v", ev)
			}
		}
	}
	if dropped {
		h.dropTurns++
	}
}

// dialGA opens a GA session on /v1/realtime (no dialect query) and reads session.created.
func dialGA(t *testing.T, s *binServer) *rtClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	ws, _, err := websocket.Dial(ctx, "ws://"+s.addr+"/v1/realtime", nil) //nolint:bodyclose // coder/websocket closes it
	require.NoError(t, err)
	ws.SetReadLimit(64 << 20)
	c := &rtClient{ws: ws, events: make(chan rtEvent, 4096), done: make(chan struct{}), ctx: ctx}
	go func() {
		defer close(c.done)
		defer close(c.events)
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				c.readErr = err
				return
			}
			var m map[string]any
			if json.Unmarshal(b, &m) != nil {
				continue
			}
			select {
			case c.events <- rtEvent{m: m, at: time.Now()}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		_ = ws.CloseNow()
		<-c.done
		cancel()
	})
	created := c.until(t, "session.created", 10*time.Second)
	sess, _ := created["session"].(map[string]any)
	require.Equal(t, "auto", sess["truncation"], "the default is auto")
	c.sid, _ = sess["id"].(string)
	require.NotEmpty(t, c.sid)
	return c
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
