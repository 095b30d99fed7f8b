package rtcclient

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/protocol"
)

func ptr[T any](v T) *T { return &v }

// TestEncodeRoundTrip: every event the client encodes decodes, by the server's own decoder, to
// the same value.
func TestEncodeRoundTrip(t *testing.T) {
	t.Parallel()
	h := func(kind string) protocol.Header { return protocol.Header{ID: "ev_1", Kind: kind} }
	tests := []struct {
		name string
		ev   protocol.ClientEvent
	}{
		{"commit", &protocol.InputAudioBufferCommit{Header: h("input_audio_buffer.commit")}},
		{"commit with response_create", &protocol.InputAudioBufferCommit{Header: h("input_audio_buffer.commit"), ResponseCreate: ptr(true)}},
		{"input clear", &protocol.InputAudioBufferClear{Header: h("input_audio_buffer.clear")}},
		{"response.create", &protocol.ResponseCreate{Header: h("response.create"), MaxOutputTokens: ptr(6), Instructions: ptr("Be brief.")}},
		{"response.create out of band", &protocol.ResponseCreate{Header: h("response.create"), Conversation: "none",
			Metadata: map[string]string{"k": "v"}, Input: []protocol.InputItem{{Role: "user", Text: "hi"}}}},
		{"response.cancel", &protocol.ResponseCancel{Header: h("response.cancel"), ResponseID: "resp_1"}},
		{"output clear", &protocol.OutputAudioBufferClear{Header: h("output_audio_buffer.clear")}},
		{"item create", &protocol.ConversationItemCreate{Header: h("conversation.item.create"), Role: "user", Text: "Say hello."}},
		{"tool output", &protocol.ConversationItemCreate{Header: h("conversation.item.create"), ItemType: "function_call_output", CallID: "call_1", Output: `{"ok":true}`}},
		{"truncate", &protocol.ConversationItemTruncate{Header: h("conversation.item.truncate"), ItemID: "item_1", AudioEndMs: 300}},
		{"delete", &protocol.ConversationItemDelete{Header: h("conversation.item.delete"), ItemID: "item_1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := encodeEvent(tt.ev)
			require.NoError(t, err)
			got, perr := protocol.DecodeClientEvent(b)
			require.Nil(t, perr, "%s", b)
			require.Equal(t, tt.ev, got, "%s", b)
		})
	}
	_, err := encodeEvent(&protocol.InputAudioBufferAppend{Header: h("input_audio_buffer.append")})
	require.Error(t, err, "a call's audio is RTP, never an append")
}
