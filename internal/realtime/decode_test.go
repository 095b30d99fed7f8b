package realtime

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/session"
)

// Every client event the protocol decodes maps to a command of its kind (command panics on an
// event it does not know).
func TestDecodeMapsEveryClientEvent(t *testing.T) {
	tests := []struct {
		in   string
		want session.Command
	}{
		{`{"type":"session.update","session":{"instructions":"x"}}`, &session.UpdateSession{}},
		{`{"type":"input_audio_buffer.append","audio":"AAA=","format":"g711_ulaw"}`, &session.AppendAudio{}},
		{`{"type":"input_audio_buffer.commit","response_create":false}`, &session.CommitInput{}},
		{`{"type":"input_audio_buffer.clear"}`, &session.ClearInput{}},
		{`{"type":"response.create","response":{"input":[{"type":"item_reference","id":"i"}]}}`, &session.CreateResponse{}},
		{`{"type":"response.cancel"}`, &session.CancelResponse{}},
		{`{"type":"conversation.item.create","item":{"role":"user","content":[{"type":"input_text","text":"hi"}]}}`, &session.CreateItem{}},
		{`{"type":"conversation.item.delete","item_id":"i"}`, &session.DeleteItem{}},
		{`{"type":"conversation.item.retrieve","item_id":"i"}`, &session.RetrieveItem{}},
		{`{"type":"conversation.item.truncate","item_id":"i","audio_end_ms":0}`, &session.TruncateItem{}},
		{`{"type":"output_audio_buffer.clear"}`, &session.ClearOutputAudio{}},
		{`{"type":"input.cancel"}`, &session.CancelInput{}},
		{`{"type":"barge_in"}`, &session.BargeIn{}},
		{`{"type":"turn.signal","event":"response.cancel"}`, &session.CancelResponse{}},
		{`{"type":"session.close"}`, &session.CloseSession{}},
		{`{"type":"session.heartbeat"}`, &session.Heartbeat{}},
		{`{"type":"session.resume","session_id":"s","resume_token":"t","last_received_server_event_seq":3}`, &ResumeSession{}},
		{`{"type":"playback.ack","played_ms":1}`, &session.PlaybackAck{}},
	}
	for _, tt := range tests {
		cmd, werr := DecodeClientEvent([]byte(tt.in))
		require.Nil(t, werr, tt.in)
		require.IsType(t, tt.want, cmd, tt.in)
	}
	cmd, _ := DecodeClientEvent([]byte(`{"type":"input_audio_buffer.append","event_id":"e","audio":"AAA=","format":{"type":"pcm16","rate":16000}}`))
	require.Equal(t, &session.AppendAudio{Base: session.Base{ID: "e", Kind: "input_audio_buffer.append"}, Data: []byte{0, 0},
		Format: &session.AudioFormat{Type: "pcm16", Rate: 16000}}, cmd)
}
