package realtime

import (
	"testing"
	"unicode/utf8"
)

func FuzzDecodeClientEvent(f *testing.F) {
	for _, s := range []string{
		`{"type":"session.update","session":{"modalities":["text","audio"],"turn_detection":null,"input_audio_format":{"type":"audio/pcm","rate":24000}}}`,
		`{"type":"session.update","session":{"audio":{"input":{"format":"pcm16","sample_rate_hz":16000,"turn_detection":{"type":"server_vad","threshold":0.4}}},"extra_body":{"auto_response":true},"max_response_output_tokens":"inf"}}`,
		`{"type":"input_audio_buffer.append","audio":"AAAA","format":"g711_ulaw"}`,
		`{"type":"input_audio_buffer.commit","response_create":true}`,
		`{"type":"response.create","response":{"max_output_tokens":5,"modalities":["text"]}}`,
		`{"type":"conversation.item.create","item":{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}}`,
		`{"type":"conversation.item.truncate","item_id":"item_1","content_index":0,"audio_end_ms":120}`,
		`{"type":"playback.ack","played_ms":300,"truncate":true}`,
		`{"type":"turn.signal","event":"barge_in"}`,
		`{"type":5}`, `[]`, `null`, `{"type":"session.update","session":[]}`, `{`,
		"{\"type\":\"conversation.item.create\",\"item\":{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"\xff\xfe\"}]}}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, werr := DecodeClientEvent(data)
		if (cmd == nil) == (werr == nil) {
			t.Fatalf("exactly one of command and error: cmd=%v err=%v", cmd, werr)
		}
		if werr != nil {
			if werr.Code == "" || werr.Message == "" {
				t.Fatalf("error without code or message: %+v", werr)
			}
			ev := errorEvent(werr)
			if ev.Type != "error" {
				t.Fatalf("error event type %q", ev.Type)
			}
			return
		}
		if !utf8.Valid(data) {
			t.Fatalf("an event that is not valid UTF-8 was accepted: %q", data)
		}
		if cmd.Type() == "" {
			t.Fatalf("command without type: %#v", cmd)
		}
	})
}
