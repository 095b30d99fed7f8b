package test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Cancel right after response.create (issue 10), on the real binary with real speech: the
// utterance is committed, then response.create and response.cancel go out back to back, so the
// cancel lands while the input's transcription and prefill are still queued and before the
// engine starts the response. The turn's tables are logged once, with reason cancel, and hold
// the work of the input it answered: stage 0's listen (VAD + ASR) time and the prompt tokens of
// the committed utterance. Nothing of that input leaks into the next turn: a second utterance
// answered normally has no more stage-0 tokens in than that utterance answered in a fresh
// session.
func TestDuplexCancelRightAfterCreate(t *testing.T) {
	raw, err := os.ReadFile(goForwardRaw)
	require.NoError(t, err, "install pocketsphinx-testdata")
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--log-stats",
		"--log-format", "json", "--cache-dir", filepath.Join(t.TempDir(), "cache"))
	session := map[string]any{"turn_detection": nil, "modalities": []string{"text"}, "max_response_output_tokens": 8}

	// The reference: the utterance answered in a fresh session.
	ref := dialRT(t, s, session)
	refID := ref.respondTo(t, raw)
	ref.until(t, "response.done", 30*time.Second)
	refTurn := waitTurn(t, s, refID)
	ref.close(t)
	refIn := stageCol(t, refTurn, 0)["num_tokens_in"]

	c := dialRT(t, s, session)
	c.stream(t, raw, 0)
	c.send(t, map[string]any{"type": "input_audio_buffer.commit"})
	c.send(t, map[string]any{"type": "response.create"})
	c.send(t, map[string]any{"type": "response.cancel"})
	created := c.untilEv(t, "response.created", 30*time.Second)
	rid := responseID(created.m)
	done := c.until(t, "response.done", 30*time.Second)
	require.Equal(t, "cancelled", status(done))
	c.until(t, "conversation.item.input_audio_transcription.completed", 30*time.Second)

	tt := waitTurn(t, s, rid)
	s0 := stageCol(t, tt, 0)
	t.Logf("cancelled turn: stage 0 %v, e2e %.0f ms; reference turn stage 0 %v", s0, tt.e2eMs, stageCol(t, refTurn, 0))
	require.Equal(t, "cancel", tt.reason)
	require.Equal(t, "1", tt.turn)
	require.Positive(t, s0["stage_gen_time_ms"], "the input's listen (VAD + ASR) work")
	require.Positive(t, s0["num_tokens_in"], "the committed utterance's prompt tokens")
	require.Nil(t, s0["num_tokens_out"], "no generation ran")

	// The next turn: a second utterance, answered. Its stage-0 tokens in are its own.
	r2 := c.respondTo(t, raw)
	done2 := c.until(t, "response.done", 30*time.Second)
	t2 := waitTurn(t, s, r2)
	s0b := stageCol(t, t2, 0)
	t.Logf("next turn: stage 0 %v", s0b)
	require.Equal(t, naturalReason(done2), t2.reason)
	require.Equal(t, "2", t2.turn)
	// In a fresh session the utterance's prompt also pays the conversation's start, so its
	// tokens in bound the next turn's; a leak of the cancelled input would add that input's.
	require.Positive(t, s0b["num_tokens_in"])
	require.LessOrEqual(t, s0b["num_tokens_in"], refIn, "the next turn holds only its own input")

	c.send(t, map[string]any{"type": "session.close"})
	c.until(t, "session.closed", 10*time.Second)
	c.close(t)
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, 1, turnOf(s.logs.String(), rid).sets, "the cancelled turn is logged exactly once")
	require.Equal(t, 1, turnOf(s.logs.String(), r2).sets)
}

// The client's playback.ack is a figure of the turn (issue 10, delivery "playback acked where
// the client acks"): audio_played_s is the last acknowledged played_ms, next to the audio sent.
func TestDuplexPlaybackAckInTurnTable(t *testing.T) {
	raw, err := os.ReadFile(goForwardRaw)
	require.NoError(t, err, "install pocketsphinx-testdata")
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--log-stats",
		"--log-format", "json", "--cache-dir", filepath.Join(t.TempDir(), "cache"))
	c := dialRT(t, s, map[string]any{"turn_detection": nil, "max_response_output_tokens": 200})
	rid := c.respondTo(t, raw)
	c.until(t, "response.output_audio.delta", 30*time.Second)
	c.send(t, map[string]any{"type": "playback.ack", "response_id": rid, "played_ms": 40})
	ack := c.until(t, "playback.acknowledged", 10*time.Second)
	played, _ := ack["played_ms"].(float64)
	require.Positive(t, played)
	c.send(t, map[string]any{"type": "response.cancel"})
	done := c.until(t, "response.done", 30*time.Second)
	require.Equal(t, "cancelled", status(done))
	tt := waitTurn(t, s, rid)
	t.Logf("acked %.0f ms; logged audio_played_s %.3f, audio_delivered_s %.3f", played, tt.playedS, tt.deliveredS)
	require.Equal(t, "cancel", tt.reason)
	require.InDelta(t, played/1000, tt.playedS, 1e-9, "the last acknowledged playback")
	require.LessOrEqual(t, tt.playedS, tt.deliveredS, "never more than was sent")
	// Prometheus gets the same figure, once for the turn.
	require.Eventually(t, func() bool { return metricValue(t, s, "omniserve_duplex_audio_played_seconds_count") == 1 },
		10*time.Second, 50*time.Millisecond)
	require.InDelta(t, played/1000, metricValue(t, s, "omniserve_duplex_audio_played_seconds_sum"), 1e-9)
	c.close(t)
}
