package test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRealtimeSemanticVAD drives semantic_vad on the real binary with real speech (goforward.raw,
// streamed in real time): a realtime session ends the turn in the pause after the speech, says
// why on speech_stopped (the end_of_turn extension: the thinker's probability and the reason),
// commits and answers; a transcription session transcribes the turn and never answers; a bad
// eagerness is invalid_value naming the parameter. The dummy model's end-of-turn probability
// means nothing, so only the mechanics are asserted (a probability in [0, 1], a known reason,
// the pause within the eagerness's bounds), not which reason won. A ?duplex=1 auto-response
// session ends its turn on the engine stream's own estimate, with the same end_of_turn.
func TestRealtimeSemanticVAD(t *testing.T) {
	t.Parallel()
	// The dummy model's probability means nothing, so by default it is not asked
	// (pipeline.thinker.end_of_turn: auto); this test asks it to drive the mechanics.
	cfg := filepath.Join(t.TempDir(), "eot.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("pipeline:\n  thinker:\n    end_of_turn: thinker\n"), 0o600))
	s := startBinary(t, "--config", cfg, "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	base := "ws://" + s.addr + "/v1/realtime"
	// high eagerness: at least 200 ms of silence before the thinker is asked, 2 s at most.
	speech := speech24k(t, 3*time.Second)
	endOfTurn := func(t *testing.T, evs []map[string]any) map[string]any {
		t.Helper()
		for _, ev := range evs {
			if ev["type"] == "input_audio_buffer.speech_stopped" {
				eot, ok := ev["end_of_turn"].(map[string]any)
				require.True(t, ok, "speech_stopped carries end_of_turn: %v", ev)
				t.Logf("end_of_turn %v", eot)
				require.Contains(t, []any{"semantic", "max_wait"}, eot["reason"], "the engine estimates, so silence alone never decides")
				p, ok := eot["probability"].(float64)
				require.True(t, ok, "the thinker's probability is reported")
				require.GreaterOrEqual(t, p, 0.0)
				require.LessOrEqual(t, p, 1.0)
				silence := eot["silence_ms"].(float64)
				require.GreaterOrEqual(t, silence, 200.0)
				require.LessOrEqual(t, silence, 2100.0)
				return eot
			}
		}
		t.Fatal("no speech_stopped")
		return nil
	}
	update := func(typ string, extra map[string]any) map[string]any {
		in := map[string]any{
			"format":         map[string]any{"type": "audio/pcm", "rate": 24000},
			"turn_detection": map[string]any{"type": "semantic_vad", "eagerness": "high"},
		}
		sess := map[string]any{"type": typ, "audio": map[string]any{"input": in}}
		for k, v := range extra {
			sess[k] = v
		}
		return map[string]any{"type": "session.update", "session": sess}
	}

	t.Run("realtime commits and answers", func(t *testing.T) {
		c := dialResume(t, base)
		require.Equal(t, "session.created", c.next(t, 10*time.Second)["type"])
		c.send(t, update("realtime", map[string]any{"output_modalities": []string{"text"}, "max_output_tokens": 8}))
		updated := collectUntil(t, c, "session.updated", 10*time.Second)
		td := updated[len(updated)-1]["session"].(map[string]any)["audio"].(map[string]any)["input"].(map[string]any)["turn_detection"].(map[string]any)
		require.Equal(t, "semantic_vad", td["type"])
		require.Equal(t, "high", td["eagerness"])
		_, evs, _ := streamAndCollect(t, c, speech, "response.done", 60*time.Second)
		var order []string
		for _, ev := range evs {
			switch typ := ev["type"].(string); typ {
			case "input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped", "input_audio_buffer.committed", "response.created", "response.done":
				order = append(order, typ)
			}
		}
		require.Equal(t, []string{"input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
			"input_audio_buffer.committed", "response.created", "response.done"}, order)
		endOfTurn(t, evs)
		// max_output_tokens 8 may cut the dummy model's reply: incomplete is an answer too.
		require.Contains(t, []any{"completed", "incomplete"}, evs[len(evs)-1]["response"].(map[string]any)["status"])
		code, _ := s.get(t, "/metrics")
		require.Equal(t, http.StatusOK, code)
		require.GreaterOrEqual(t, metricValue(t, s, "omniserve_realtime_semantic_vad_turns_total"), 1.0)
		require.GreaterOrEqual(t, metricValue(t, s, "omniserve_realtime_semantic_vad_end_of_turn_probability_count"), 1.0)
	})

	t.Run("duplex auto-response", func(t *testing.T) {
		// ?duplex=1 with create_response: the engine stream endpoints the turn itself, on the
		// same estimate (stage/duplex_semvad.go); its speak decision closes the segment.
		turns := metricValue(t, s, "omniserve_realtime_semantic_vad_turns_total")
		c := dialResume(t, base+"?duplex=1")
		require.Equal(t, "session.created", c.next(t, 10*time.Second)["type"])
		c.send(t, update("realtime", map[string]any{"output_modalities": []string{"text"}, "max_output_tokens": 8}))
		collectUntil(t, c, "session.updated", 10*time.Second)
		_, evs, _ := streamAndCollect(t, c, speech, "response.done", 60*time.Second)
		var order []string
		for _, ev := range evs {
			switch typ := ev["type"].(string); typ {
			case "input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped", "response.created", "response.done":
				order = append(order, typ)
			}
		}
		require.Equal(t, []string{"input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
			"response.created", "response.done"}, order)
		endOfTurn(t, evs)
		require.Greater(t, metricValue(t, s, "omniserve_realtime_semantic_vad_turns_total"), turns)
	})

	t.Run("transcription session", func(t *testing.T) {
		c := dialResume(t, base+"?intent=transcription")
		require.Equal(t, "session.created", c.next(t, 10*time.Second)["type"])
		c.send(t, update("transcription", nil))
		collectUntil(t, c, "session.updated", 10*time.Second)
		_, evs, _ := streamAndCollect(t, c, speech, "conversation.item.input_audio_transcription.completed", 60*time.Second)
		for _, ev := range evs {
			require.False(t, strings.HasPrefix(ev["type"].(string), "response."), "a transcription session never responds: %v", ev)
		}
		endOfTurn(t, evs)
		require.Contains(t, strings.ToLower(evs[len(evs)-1]["transcript"].(string)), "forward")
	})

	t.Run("bad eagerness", func(t *testing.T) {
		c := dialResume(t, base)
		require.Equal(t, "session.created", c.next(t, 10*time.Second)["type"])
		c.send(t, map[string]any{"type": "session.update", "event_id": "evt_eager", "session": map[string]any{"type": "realtime",
			"audio": map[string]any{"input": map[string]any{"turn_detection": map[string]any{"type": "semantic_vad", "eagerness": "eager"}}}}})
		e := collectUntilError(t, c)["error"].(map[string]any)
		require.Equal(t, "invalid_value", e["code"])
		require.Equal(t, "session.audio.input.turn_detection.eagerness", e["param"])
		require.Equal(t, "evt_eager", e["event_id"])
	})
}
