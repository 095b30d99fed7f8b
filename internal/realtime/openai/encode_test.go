package openai_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/openai"
	"github.com/omniserve/omniserve/internal/session"
)

// Every effect has its OpenAI event; the frames' shapes are pinned by the protocol's golden
// frames and internal/realtime's conformance tests, which run through this translator.
func TestEncodeNamesEveryEffect(t *testing.T) {
	end := 40
	for _, tc := range []struct {
		e    session.Effect
		want string
	}{
		{session.Error{Code: "x"}, "error"},
		{session.SessionClosing{}, "session.closing"},
		{session.SessionClosed{}, "session.closed"},
		{session.SessionResumed{}, "session.resumed"},
		{session.HeartbeatAck{}, "session.heartbeat_ack"},
		{session.ResponseStarted{}, "response.created"},
		{session.ResponseDone{}, "response.done"},
		{session.OutputItem{Phase: session.PhaseAdded}, "response.output_item.added"},
		{session.OutputItem{Phase: session.PhaseDone}, "response.output_item.done"},
		{session.ContentPart{Phase: session.PhaseAdded}, "response.content_part.added"},
		{session.ContentPart{Phase: session.PhaseDone}, "response.content_part.done"},
		{session.OutputDelta{Kind: session.PartText}, "response.output_text.delta"},
		{session.OutputDelta{Kind: session.PartAudio}, "response.output_audio.delta"},
		{session.OutputDelta{Kind: session.PartTranscript}, "response.output_audio_transcript.delta"},
		{session.OutputDone{Kind: session.PartText}, "response.output_text.done"},
		{session.OutputDone{Kind: session.PartAudio}, "response.output_audio.done"},
		{session.OutputDone{Kind: session.PartTranscript}, "response.output_audio_transcript.done"},
		{session.TurnDecision{}, "response.listen"},
		{session.TurnDecision{Speak: true}, "response.speak"},
		{session.AudioBuffer{Phase: session.PhaseStarted}, "output_audio_buffer.started"},
		{session.AudioBuffer{Phase: session.PhaseStopped}, "output_audio_buffer.stopped"},
		{session.AudioBuffer{Phase: session.PhaseCleared, AudioEndMs: &end}, "output_audio_buffer.cleared"},
		{session.PlaybackAcknowledged{}, "playback.acknowledged"},
		{session.RateLimits{}, "rate_limits.updated"},
		{session.ConversationItem{Phase: session.PhaseAdded}, "conversation.item.added"},
		{session.ConversationItem{Phase: session.PhaseDone}, "conversation.item.done"},
		{session.ConversationItem{Phase: session.PhaseRetrieved}, "conversation.item.retrieved"},
		{session.ItemDeleted{}, "conversation.item.deleted"},
		{session.ItemTruncated{}, "conversation.item.truncated"},
		{session.InputSpeech{Phase: session.PhaseStarted}, "input_audio_buffer.speech_started"},
		{session.InputSpeech{Phase: session.PhaseStopped}, "input_audio_buffer.speech_stopped"},
		{session.InputCommitted{}, "input_audio_buffer.committed"},
		{session.InputCleared{}, "input_audio_buffer.cleared"},
		{session.InputTimeout{}, "input_audio_buffer.timeout_triggered"},
		{session.OverlapDecision{}, "overlap.decision"},
		{session.Transcription{Phase: session.PhaseDelta}, "conversation.item.input_audio_transcription.delta"},
		{session.Transcription{Phase: session.PhaseCompleted}, "conversation.item.input_audio_transcription.completed"},
		{session.Transcription{Phase: session.PhaseFailed, Error: &session.Error{}}, "conversation.item.input_audio_transcription.failed"},
		{session.CallArguments{Phase: session.PhaseDelta}, "response.function_call_arguments.delta"},
		{session.CallArguments{Phase: session.PhaseDone}, "response.function_call_arguments.done"},
		{session.CallArguments{Phase: session.PhaseDelta, MCP: true}, "response.mcp_call_arguments.delta"},
		{session.CallArguments{Phase: session.PhaseDone, MCP: true}, "response.mcp_call_arguments.done"},
		{session.MCPCall{Phase: session.PhaseInProgress}, "response.mcp_call.in_progress"},
		{session.MCPCall{Phase: session.PhaseCompleted}, "response.mcp_call.completed"},
		{session.MCPCall{Phase: session.PhaseFailed}, "response.mcp_call.failed"},
		{session.MCPListTools{Phase: session.PhaseInProgress}, "mcp_list_tools.in_progress"},
		{session.MCPListTools{Phase: session.PhaseCompleted}, "mcp_list_tools.completed"},
		{session.MCPListTools{Phase: session.PhaseFailed}, "mcp_list_tools.failed"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			ev, ok := openai.Encode(tc.e)
			require.True(t, ok)
			require.Equal(t, tc.want, ev.EventType())
			_, err := protocol.Encode(ev, protocol.Envelope{Type: tc.want, EventID: "event_1"}, false)
			require.NoError(t, err)
		})
	}
}

// A message item keeps its shape: the content part its role and modality call for, and the
// empty content of an item a response just added.
func TestItemShapes(t *testing.T) {
	w := openai.Item(session.Item{ID: "i", Type: "message", Role: "assistant", Status: "in_progress", Audio: true, EmptyContent: true})
	require.Empty(t, w.Content)
	require.NotNil(t, w.Content)
	w = openai.Item(session.Item{ID: "u", Type: "message", Role: "user", Status: "completed", Audio: true})
	require.Equal(t, []protocol.ContentPart{protocol.InputAudioPart("")}, w.Content)
}
