package test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRealtimeTranscriptionOpenAINode: the official OpenAI Node SDK mints a client secret for a
// transcription session (client.realtime.clientSecrets.create) and opens it with
// OpenAIRealtimeWS over wss, then streams two spoken utterances separated by silence. Server
// VAD commits each; each gets transcription deltas and then its completed transcript, in the
// order spoken, with the logprobs the minted session's include asked for; no response event is
// ever sent, and no error.
func TestRealtimeTranscriptionOpenAINode(t *testing.T) {
	srv, certFile := nodeTLSServer(t)
	last := runNodeScript(t, "transcription.mjs", "OMNISERVE_BASE_URL="+srv.URL+"/v1",
		"OMNISERVE_SPEECH_24K="+writeSpeech24k(t), "NODE_EXTRA_CA_CERTS="+certFile)
	var got struct {
		MintedType     string         `json:"minted_type"`
		MintedObject   string         `json:"minted_object"`
		MintedInclude  []string       `json:"minted_include"`
		SessionInclude []string       `json:"session_include"`
		SessionType    string         `json:"session_type"`
		Events         map[string]int `json:"events"`
		Errors         []any          `json:"errors"`
		Items          []struct {
			ID                   string            `json:"id"`
			Deltas               string            `json:"deltas"`
			DeltaEvents          int               `json:"delta_events"`
			DeltaBeforeCompleted bool              `json:"delta_before_completed"`
			Transcript           string            `json:"transcript"`
			CompletedIndex       int               `json:"completed_index"`
			Logprobs             []transcriptToken `json:"logprobs"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(last), &got), last)
	require.Empty(t, got.Errors)
	require.Equal(t, "transcription", got.MintedType)
	require.Equal(t, "realtime.transcription_session", got.MintedObject)
	require.Equal(t, "transcription", got.SessionType, "the ek_ key opened a transcription session")
	logprobs := []string{"item.input_audio_transcription.logprobs"}
	require.Equal(t, logprobs, got.MintedInclude)
	require.Equal(t, logprobs, got.SessionInclude, "the session has the minted include")
	require.Len(t, got.Items, 2, "two utterances, two committed items")
	for i, it := range got.Items {
		require.Equal(t, i, it.CompletedIndex, "completed in the order spoken")
		require.Contains(t, strings.ToLower(it.Transcript), "forward", "item %d", i)
		require.Positive(t, it.DeltaEvents, "item %d had deltas", i)
		require.True(t, it.DeltaBeforeCompleted, "item %d: deltas came before completed", i)
		require.Equal(t, it.Transcript, it.Deltas, "item %d: the deltas concatenate to the transcript", i)
		requireTranscriptTokens(t, it.Transcript, it.Logprobs)
	}
	for typ := range got.Events {
		require.False(t, strings.HasPrefix(typ, "response."), "a transcription session never responds: %s", typ)
	}
}
