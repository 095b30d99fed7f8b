package test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/rtcclient"
)

// TestWebRTCSidebandOpenAINode: the server-side half of a call with the official OpenAI Node SDK.
// A WebRTC call is made (rtcclient, as a browser would); the app's backend joins it with
// OpenAIRealtimeWS({callID}) over wss, changes the instructions, adds a user message and asks
// for a response, which the call answers: session.updated and a finished response on the
// sideband, no error, and no audio deltas there (the audio is the call's RTP).
func TestWebRTCSidebandOpenAINode(t *testing.T) {
	srv, certFile := nodeTLSServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	call, err := rtcclient.Dial(ctx, rtcclient.Config{BaseURL: srv.URL, Key: "unused", HTTP: srv.Client(),
		Session: json.RawMessage(`{"type":"realtime","audio":{"input":{"turn_detection":null}}}`)})
	require.NoError(t, err)
	defer call.Close()
	_, err = call.WaitFor(ctx, "session.created", 30*time.Second)
	require.NoError(t, err)

	last := runNodeScript(t, "sideband.mjs", "OMNISERVE_BASE_URL="+srv.URL+"/v1", "OMNISERVE_API_KEY=unused",
		"CALL_ID="+call.CallID(), "NODE_EXTRA_CA_CERTS="+certFile)
	var got struct {
		Events       map[string]int `json:"events"`
		Errors       []any          `json:"errors"`
		Instructions string         `json:"instructions"`
		Status       string         `json:"status"`
		OutputTypes  []string       `json:"output_types"`
	}
	require.NoError(t, json.Unmarshal([]byte(last), &got), last)
	require.Empty(t, got.Errors)
	require.Equal(t, "Answer in one word.", got.Instructions, "the sideband's session.update applies to the call")
	require.Contains(t, []string{"completed", "incomplete"}, got.Status)
	require.Contains(t, got.OutputTypes, "message")
	require.Zero(t, got.Events["response.output_audio.delta"], "no audio deltas on a sideband")
	require.Positive(t, got.Events["response.output_audio_transcript.delta"]+got.Events["response.output_text.delta"])
	// The call heard the same conversation: its data channel got the response too.
	_, err = call.WaitFor(ctx, "response.done", 30*time.Second)
	require.NoError(t, err)
}
