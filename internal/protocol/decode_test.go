package protocol

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecodeClientEvent(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want ClientEvent
	}{
		{"append", `{"type":"input_audio_buffer.append","event_id":"e1","audio":"AAA="}`,
			&InputAudioBufferAppend{Header: Header{ID: "e1", Kind: "input_audio_buffer.append"}, Audio: []byte{0, 0}}},
		{"append with rate", `{"type":"input_audio_buffer.append","audio":"AAA=","sample_rate_hz":16000}`,
			&InputAudioBufferAppend{Header: Header{Kind: "input_audio_buffer.append"}, Audio: []byte{0, 0}, Format: &AudioFormat{Type: "pcm16", Rate: 16000}}},
		{"commit", `{"type":"input_audio_buffer.commit"}`, &InputAudioBufferCommit{Header: Header{Kind: "input_audio_buffer.commit"}}},
		{"turn.signal keeps its type", `{"type":"turn.signal","event":"barge_in"}`, &BargeIn{Header: Header{Kind: "turn.signal"}}},
		{"playback.ack", `{"type":"playback.ack","played_ms":120,"response_id":"r"}`,
			&PlaybackAck{Header: Header{Kind: "playback.ack"}, PlayedMs: 120, ResponseID: "r"}},
		{"event ack", `{"type":"session.event_ack","server_event_seq":48}`,
			&SessionEventAck{Header: Header{Kind: "session.event_ack"}, Seq: 48}},
		// A bad ack is no error: errors are numbered and acked, so an answered ack could loop.
		{"event ack without seq", `{"type":"session.event_ack","event_id":"a"}`,
			&SessionEventAck{Header: Header{ID: "a", Kind: "session.event_ack"}, Problem: "missing server_event_seq"}},
		{"event ack with a string seq", `{"type":"session.event_ack","server_event_seq":"4"}`,
			&SessionEventAck{Header: Header{Kind: "session.event_ack"}, Problem: "server_event_seq is not an integer"}},
		{"event ack with a fraction", `{"type":"session.event_ack","server_event_seq":4.5}`,
			&SessionEventAck{Header: Header{Kind: "session.event_ack"}, Problem: "server_event_seq is not an integer"}},
		{"event ack negative", `{"type":"session.event_ack","server_event_seq":-1}`,
			&SessionEventAck{Header: Header{Kind: "session.event_ack"}, Problem: "server_event_seq is negative"}},
		{"beta session", `{"type":"session.update","session":{"modalities":["text","audio"],"input_audio_format":"pcm16"}}`,
			&SessionUpdate{Header: Header{Kind: "session.update"}, BetaSpelling: true,
				Session: SessionPatch{Modalities: []string{"text", "audio"}, InputFormat: &AudioFormat{Type: "pcm16"}}}},
		{"GA session", `{"type":"session.update","session":{"type":"realtime","output_modalities":["audio"],"audio":{"input":{"format":{"type":"audio/pcm","rate":24000}}}}}`,
			&SessionUpdate{Header: Header{Kind: "session.update"}, Session: SessionPatch{Type: ptr("realtime"),
				Modalities: []string{"audio"}, InputFormat: &AudioFormat{Type: "audio/pcm", Rate: 24000}}}},
		// Without a session object the event's own type and event_id are not the session's.
		{"no session object", `{"type":"session.update","event_id":"e2"}`,
			&SessionUpdate{Header: Header{ID: "e2", Kind: "session.update"}}},
		{"flat session", `{"type":"session.update","instructions":"be brief"}`,
			&SessionUpdate{Header: Header{Kind: "session.update"}, Session: SessionPatch{Instructions: ptr("be brief")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeClientEvent([]byte(tt.in))
			require.Nil(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// The five spellings omniserve once accepted without documenting them are refused like any
// unknown event or missing parameter.
func TestDecodeRefusesUndocumentedSpellings(t *testing.T) {
	tests := []struct {
		name, in, code, param string
	}{
		{"input.commit", `{"type":"input.commit","event_id":"e"}`, "unknown_event", "type"},
		{"close", `{"type":"close","event_id":"e"}`, "unknown_event", "type"},
		{"delta", `{"type":"input_audio_buffer.append","event_id":"e","delta":"AAA="}`, "missing_required_parameter", "audio"},
		{"audio_ms", `{"type":"playback.ack","event_id":"e","audio_ms":100}`, "missing_required_parameter", "played_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeClientEvent([]byte(tt.in))
			require.NotNil(t, err)
			require.Equal(t, Error{Code: tt.code, Param: tt.param, EventID: "e", Message: err.Message}, *err)
		})
	}
	// sample_rate is not a rate: the chunk keeps the session's format.
	got, err := DecodeClientEvent([]byte(`{"type":"input_audio_buffer.append","audio":"AAA=","sample_rate":16000}`))
	require.Nil(t, err)
	require.Nil(t, got.(*InputAudioBufferAppend).Format)
}

func ptr[T any](v T) *T { return &v }

func TestDecodeNoiseReduction(t *testing.T) {
	tests := []struct {
		name, in    string
		set         bool
		kind        string
		code, param string
	}{
		{"GA near", `{"type":"session.update","session":{"audio":{"input":{"noise_reduction":{"type":"near_field"}}}}}`, true, "near_field", "", ""},
		{"beta far", `{"type":"session.update","session":{"input_audio_noise_reduction":{"type":"far_field"}}}`, true, "far_field", "", ""},
		{"null", `{"type":"session.update","session":{"audio":{"input":{"noise_reduction":null}}}}`, true, "", "", ""},
		{"absent", `{"type":"session.update","session":{}}`, false, "", "", ""},
		{"unknown type", `{"type":"session.update","session":{"audio":{"input":{"noise_reduction":{"type":"studio"}}}}}`, false, "",
			"invalid_value", "session.audio.input.noise_reduction.type"},
		{"not an object", `{"type":"session.update","session":{"input_audio_noise_reduction":"near_field"}}`, false, "",
			"invalid_type", "session.input_audio_noise_reduction"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeClientEvent([]byte(tt.in))
			if tt.code != "" {
				require.NotNil(t, err)
				require.Equal(t, tt.code, err.Code)
				require.Equal(t, tt.param, err.Param)
				return
			}
			require.Nil(t, err)
			p := got.(*SessionUpdate).Session
			require.Equal(t, tt.set, p.NoiseReductionSet)
			require.Equal(t, tt.kind, p.NoiseReduction)
		})
	}
}

// A function_call item a client creates (a conversation's history restored): call_id and name
// are required, arguments is JSON text ("{}" when absent).
func TestDecodeFunctionCallItem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, raw, param, args string
	}{
		{"whole", `{"type":"conversation.item.create","item":{"type":"function_call","call_id":"c1","name":"f","arguments":"{\"a\":1}"}}`, "", `{"a":1}`},
		{"no arguments", `{"type":"conversation.item.create","item":{"type":"function_call","call_id":"c1","name":"f"}}`, "", "{}"},
		{"no call_id", `{"type":"conversation.item.create","item":{"type":"function_call","name":"f"}}`, "item.call_id", ""},
		{"no name", `{"type":"conversation.item.create","item":{"type":"function_call","call_id":"c1"}}`, "item.name", ""},
		{"arguments an object", `{"type":"conversation.item.create","item":{"type":"function_call","call_id":"c1","name":"f","arguments":{"a":1}}}`, "item.arguments", ""},
		{"arguments not JSON", `{"type":"conversation.item.create","item":{"type":"function_call","call_id":"c1","name":"f","arguments":"{a"}}`, "item.arguments", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev, err := DecodeClientEvent([]byte(tc.raw))
			if tc.param != "" {
				require.NotNil(t, err)
				require.Equal(t, tc.param, err.Param)
				return
			}
			require.Nil(t, err)
			c := ev.(*ConversationItemCreate)
			require.Equal(t, "function_call", c.ItemType)
			require.Equal(t, "c1", c.CallID)
			require.Equal(t, "f", c.Name)
			require.Equal(t, tc.args, c.Arguments)
		})
	}
}
