package test

import (
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRealtimeConversationTranscriptDeltas: a conversation session (type "realtime") with
// input transcription on gets conversation.item.input_audio_transcription.delta while the user
// speaks, as OpenAI's conversation sessions do, and is still answered; with transcription null
// it gets no transcription event at all. Real speech (goforward.raw) paced in real time over a
// plain WebSocket, server VAD, on the real binary.
func TestRealtimeConversationTranscriptDeltas(t *testing.T) {
	t.Parallel()
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	base := "ws://" + s.addr + "/v1/realtime"
	speech := speech24k(t, 1500*time.Millisecond)
	const deltaType = "conversation.item.input_audio_transcription.delta"
	const completedType = "conversation.item.input_audio_transcription.completed"

	// converse opens a GA conversation with server VAD and the given transcription, streams the
	// speech in real time and returns every event up to the response's end and, with
	// transcription on, the item's completed transcript.
	converse := func(t *testing.T, transcription any) []map[string]any {
		c := dialResume(t, base)
		require.Equal(t, "session.created", c.next(t, 10*time.Second)["type"])
		c.send(t, map[string]any{"type": "session.update", "session": map[string]any{
			"type": "realtime", "output_modalities": []string{"text"},
			"audio": map[string]any{"input": map[string]any{
				"format":         map[string]any{"type": "audio/pcm", "rate": 24000},
				"transcription":  transcription,
				"turn_detection": map[string]any{"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500},
			}},
		}})
		updated := collectUntil(t, c, "session.updated", 10*time.Second)
		in := updated[len(updated)-1]["session"].(map[string]any)["audio"].(map[string]any)["input"].(map[string]any)
		if transcription == nil {
			require.Nil(t, in["transcription"])
		} else {
			require.NotNil(t, in["transcription"])
		}
		_, evs, _ := streamAndCollect(t, c, speech, "response.done", 60*time.Second)
		if transcription != nil && !slices.ContainsFunc(evs, func(ev map[string]any) bool { return ev["type"] == completedType }) {
			evs = append(evs, collectUntil(t, c, completedType, 30*time.Second)...)
		}
		// Nothing of the utterance may trail: its deltas and transcript precede the answer
		// (the commit's job transcribes before it responds) or the read above waited for them.
		select {
		case ev := <-c.events:
			require.NotContains(t, ev["type"], "input_audio_transcription", "%v", ev)
		case <-time.After(300 * time.Millisecond):
		}
		return evs
	}

	t.Run("transcription on", func(t *testing.T) {
		evs := converse(t, map[string]any{"model": "gpt-4o-transcribe", "language": "en"})
		var order []string
		var committed, deltas, transcript string
		var deltaItems []string
		for _, ev := range evs {
			typ := ev["type"].(string)
			switch typ {
			case "input_audio_buffer.committed":
				committed = ev["item_id"].(string)
			case deltaType:
				deltas += ev["delta"].(string)
				deltaItems = append(deltaItems, ev["item_id"].(string))
				require.EqualValues(t, 0, ev["content_index"])
			case completedType:
				transcript = ev["transcript"].(string)
				require.Equal(t, committed, ev["item_id"])
			case "input_audio_buffer.speech_stopped", "response.done":
			default:
				continue
			}
			order = append(order, typ)
		}
		t.Logf("event order: %v; deltas %q, transcript %q", order, deltas, transcript)
		stopped := slices.Index(order, "input_audio_buffer.speech_stopped")
		require.GreaterOrEqual(t, stopped, 0)
		require.Less(t, slices.Index(order, deltaType), stopped, "a delta came while the user spoke")
		require.NotEmpty(t, committed)
		for _, id := range deltaItems {
			require.Equal(t, committed, id, "every delta names the committed item")
		}
		require.Contains(t, strings.ToLower(transcript), "forward", "pocketsphinx heard the speech")
		require.Equal(t, transcript, deltas, "the deltas add up to the transcript")
		require.Contains(t, order, "response.done", "the conversation still answers")
	})

	t.Run("transcription null", func(t *testing.T) {
		evs := converse(t, nil)
		var types []string
		for _, ev := range evs {
			types = append(types, ev["type"].(string))
			require.NotContains(t, ev["type"], "input_audio_transcription", "transcription is off: %v", ev)
		}
		require.Contains(t, types, "input_audio_buffer.committed")
		require.Contains(t, types, "response.done")
	})

	t.Run("beta manual commit", func(t *testing.T) {
		c := dialResumeHeader(t, base, http.Header{"OpenAI-Beta": {"realtime=v1"}})
		require.Equal(t, "session.created", c.next(t, 10*time.Second)["type"])
		c.send(t, map[string]any{"type": "session.update", "session": map[string]any{
			"modalities": []string{"text"}, "input_audio_format": "pcm16",
			"input_audio_transcription": map[string]any{"model": "whisper-1"}, "turn_detection": nil,
		}})
		collectUntil(t, c, "session.updated", 10*time.Second)
		sendAudio(t, c, speech)
		c.send(t, map[string]any{"type": "input_audio_buffer.commit"})
		evs := collectUntil(t, c, completedType, 60*time.Second)
		var committed, deltas string
		var deltaItems []string
		for _, ev := range evs {
			switch ev["type"] {
			case "input_audio_buffer.committed":
				committed = ev["item_id"].(string)
			case deltaType: // the beta dialect spells it the same
				deltas += ev["delta"].(string)
				deltaItems = append(deltaItems, ev["item_id"].(string))
			}
		}
		done := evs[len(evs)-1]
		require.Equal(t, committed, done["item_id"])
		require.NotEmpty(t, deltaItems)
		for _, id := range deltaItems {
			require.Equal(t, committed, id, "deltas before the commit name the item it adds; after it, that item")
		}
		require.Contains(t, strings.ToLower(done["transcript"].(string)), "forward")
		require.Equal(t, done["transcript"], deltas)
	})
}
