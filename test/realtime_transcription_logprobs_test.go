package test

import (
	"encoding/json"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// transcriptToken is OpenAI's LogProbProperties, as conversation.item.input_audio_transcription.
// completed carries it.
type transcriptToken struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// requireTranscriptTokens checks a transcript's logprobs: one token per word (its leading
// space included after the first), the tokens joining to the transcript, each logprob finite
// and at most 0, and bytes the token's UTF-8.
func requireTranscriptTokens(t *testing.T, transcript string, lps []transcriptToken) {
	t.Helper()
	words := strings.Fields(transcript)
	require.NotEmpty(t, words, "no words heard")
	require.Len(t, lps, len(words), "one logprob per word of %q: %+v", transcript, lps)
	var joined strings.Builder
	for i, lp := range lps {
		want := words[i]
		if i > 0 {
			want = " " + want
		}
		require.Equal(t, want, lp.Token)
		require.False(t, math.IsNaN(lp.Logprob) || math.IsInf(lp.Logprob, 0), "token %q: %v", lp.Token, lp.Logprob)
		require.LessOrEqual(t, lp.Logprob, 0.0, "token %q", lp.Token)
		b := make([]byte, len(lp.Bytes))
		for j, x := range lp.Bytes {
			b[j] = byte(x)
		}
		require.Equal(t, lp.Token, string(b), "bytes are the token's")
		joined.WriteString(lp.Token)
	}
	require.Equal(t, transcript, joined.String(), "the tokens join to the transcript")
}

// completedLogprobs decodes a completed event's logprobs; present reports whether the key was
// there at all.
func completedLogprobs(t *testing.T, ev map[string]any) (lps []transcriptToken, present bool) {
	t.Helper()
	v, ok := ev["logprobs"]
	if !ok {
		return nil, false
	}
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &lps))
	return lps, true
}

// TestRealtimeTranscriptionLogprobs: include ["item.input_audio_transcription.logprobs"] on the
// real binary with real speech (pocketsphinx goforward), over plain WebSocket as OpenAI's
// guide writes the events: a GA transcription session (server VAD) and a beta one (manual
// commits, include turned off again), and a conversation session with input transcription.
// The completed transcript carries one logprob per word exactly while include asks.
func TestRealtimeTranscriptionLogprobs(t *testing.T) {
	t.Parallel()
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	base := "ws://" + s.addr + "/v1/realtime"
	speech := speech24k(t, 1500*time.Millisecond)
	include := []any{"item.input_audio_transcription.logprobs"}

	t.Run("GA server VAD", func(t *testing.T) {
		c := dialResume(t, base+"?intent=transcription")
		require.Equal(t, "session.created", c.next(t, 10*time.Second)["type"])
		c.send(t, map[string]any{"type": "session.update", "session": map[string]any{
			"type": "transcription",
			"audio": map[string]any{"input": map[string]any{
				"format":         map[string]any{"type": "audio/pcm", "rate": 24000},
				"transcription":  map[string]any{"model": "gpt-4o-transcribe", "language": "en"},
				"turn_detection": map[string]any{"type": "server_vad", "silence_duration_ms": 500},
			}},
			"include": include,
		}})
		updated := collectUntil(t, c, "session.updated", 10*time.Second)
		require.Equal(t, include, updated[len(updated)-1]["session"].(map[string]any)["include"])
		_, evs, _ := streamAndCollect(t, c, speech, "conversation.item.input_audio_transcription.completed", 60*time.Second)
		done := evs[len(evs)-1]
		transcript := done["transcript"].(string)
		require.Contains(t, strings.ToLower(transcript), "forward", "pocketsphinx heard the speech")
		lps, ok := completedLogprobs(t, done)
		require.True(t, ok, "include asked for logprobs: %v", done)
		requireTranscriptTokens(t, transcript, lps)
		raw, err := json.Marshal(done)
		require.NoError(t, err)
		t.Logf("%s", raw)
	})

	t.Run("beta manual commit", func(t *testing.T) {
		c := dialResumeHeader(t, base+"?intent=transcription", http.Header{"OpenAI-Beta": {"realtime=v1"}})
		require.Equal(t, "transcription_session.created", c.next(t, 10*time.Second)["type"])
		update := func(inc []any) {
			c.send(t, map[string]any{"type": "transcription_session.update", "session": map[string]any{
				"input_audio_format":        "pcm16",
				"input_audio_transcription": map[string]any{"model": "whisper-1"},
				"turn_detection":            nil,
				"include":                   inc,
			}})
			updated := collectUntil(t, c, "transcription_session.updated", 10*time.Second)
			got := updated[len(updated)-1]["session"].(map[string]any)["include"]
			if len(inc) == 0 {
				require.Nil(t, got)
			} else {
				require.Equal(t, inc, got)
			}
		}
		commit := func() map[string]any {
			sendAudio(t, c, speech)
			c.send(t, map[string]any{"type": "input_audio_buffer.commit"})
			evs := collectUntil(t, c, "conversation.item.input_audio_transcription.completed", 60*time.Second)
			return evs[len(evs)-1]
		}
		update(include)
		done := commit()
		lps, ok := completedLogprobs(t, done)
		require.True(t, ok, "include asked for logprobs: %v", done)
		requireTranscriptTokens(t, done["transcript"].(string), lps)

		update([]any{})
		done = commit()
		require.Contains(t, strings.ToLower(done["transcript"].(string)), "forward")
		_, ok = completedLogprobs(t, done)
		require.False(t, ok, "include [] asks for none: %v", done)

		c.send(t, map[string]any{"type": "transcription_session.update", "event_id": "evt_bad", "session": map[string]any{"include": []any{"item.input_audio_transcription.tokens"}}})
		e := collectUntilError(t, c)["error"].(map[string]any)
		require.Equal(t, "session.include", e["param"])
		require.Equal(t, "invalid_value", e["code"])
	})

	t.Run("conversation with input transcription", func(t *testing.T) {
		c := dialResume(t, base)
		require.Equal(t, "session.created", c.next(t, 10*time.Second)["type"])
		c.send(t, map[string]any{"type": "session.update", "session": map[string]any{
			"type":              "realtime",
			"output_modalities": []any{"text"},
			"audio": map[string]any{"input": map[string]any{
				"format":         map[string]any{"type": "audio/pcm", "rate": 24000},
				"transcription":  map[string]any{"model": "gpt-4o-mini-transcribe"},
				"turn_detection": nil,
			}},
			"include": include,
		}})
		updated := collectUntil(t, c, "session.updated", 10*time.Second)
		require.Equal(t, include, updated[len(updated)-1]["session"].(map[string]any)["include"])
		sendAudio(t, c, speech)
		c.send(t, map[string]any{"type": "input_audio_buffer.commit"})
		evs := collectUntil(t, c, "conversation.item.input_audio_transcription.completed", 60*time.Second)
		done := evs[len(evs)-1]
		lps, ok := completedLogprobs(t, done)
		require.True(t, ok, "include asked for logprobs: %v", done)
		requireTranscriptTokens(t, done["transcript"].(string), lps)
	})
}
