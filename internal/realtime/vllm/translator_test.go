package vllm_test

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/vllm"
	"github.com/omniserve/omniserve/internal/session"
)

func ptr[T any](v T) *T { return &v }

func frame(t *testing.T, ev map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(ev)
	require.NoError(t, err)
	return b
}

// Each of vllm-omni's spellings (docs/REALTIME.md "vllm-omni duplex dialect") decodes to the
// command OpenAI's spelling of the same event would.
func TestDecodeVLLMSpellings(t *testing.T) {
	pcm := []byte{1, 0, 2, 0}
	wav := audio.EncodeWAV([]float32{0, 0.5, -0.5, 0}, 16000)
	samples, _, err := audio.DecodeWAV(wav)
	require.NoError(t, err)
	wavPCM := audio.Float32ToPCM16Bytes(nil, samples)
	b64 := base64.StdEncoding.EncodeToString
	tests := []struct {
		name string
		ev   map[string]any
		want session.Command
	}{
		{"push_chunk, pcm16 with sample_rate", map[string]any{"type": "push_chunk", "audio": b64(pcm), "format": "pcm16", "sample_rate": 16000},
			&session.AppendAudio{Base: session.Base{Kind: "push_chunk"}, Data: pcm, Format: &session.AudioFormat{Type: "pcm16", Rate: 16000}}},
		{"input.audio.append is a WAV file by default", map[string]any{"type": "input.audio.append", "event_id": "e1", "audio": b64(wav)},
			&session.AppendAudio{Base: session.Base{ID: "e1", Kind: "input.audio.append"}, Data: wavPCM, Format: &session.AudioFormat{Type: "pcm16", Rate: 16000}}},
		{"append with input_audio_format pcm_s16le", map[string]any{"type": "input_audio_buffer.append", "audio": b64(pcm), "input_audio_format": "pcm_s16le", "sample_rate_hz": 16000},
			&session.AppendAudio{Base: session.Base{Kind: "input_audio_buffer.append"}, Data: pcm, Format: &session.AudioFormat{Type: "pcm16", Rate: 16000}}},
		{"append, format wav", map[string]any{"type": "input_audio_buffer.append", "audio": b64(wav), "format": "wav"},
			&session.AppendAudio{Base: session.Base{Kind: "input_audio_buffer.append"}, Data: wavPCM, Format: &session.AudioFormat{Type: "pcm16", Rate: 16000}}},
		{"input.commit asks for a response", map[string]any{"type": "input.commit", "final": true},
			&session.CommitInput{Base: session.Base{Kind: "input.commit"}, ResponseCreate: ptr(true)}},
		{"input.commit, response_create false", map[string]any{"type": "input.commit", "response_create": false},
			&session.CommitInput{Base: session.Base{Kind: "input.commit"}}}, // the engine decides
		{"commit with create_response", map[string]any{"type": "input_audio_buffer.commit", "create_response": true},
			&session.CommitInput{Base: session.Base{Kind: "input_audio_buffer.commit"}, ResponseCreate: ptr(true), OverlapTiers: true}},
		{"commit as OpenAI's", map[string]any{"type": "input_audio_buffer.commit"},
			&session.CommitInput{Base: session.Base{Kind: "input_audio_buffer.commit"}, OverlapTiers: true}},
		{"flat session.update, its type ignored", map[string]any{"type": "session.update", "event_id": "u", "instructions": "Be brief."},
			&session.UpdateSession{Base: session.Base{ID: "u", Kind: "session.update"}, Patch: session.ConfigPatch{Instructions: ptr("Be brief."),
				InputFormat: &session.AudioFormat{Type: "pcm16", Rate: 16000}}}}, // the dialect's default input rate
		{"close_session", map[string]any{"type": "close_session"}, &session.CloseSession{Base: session.Base{Kind: "close_session"}}},
		{"close", map[string]any{"type": "close"}, &session.CloseSession{Base: session.Base{Kind: "close"}}},
		{"audio.playback_ack", map[string]any{"type": "audio.playback_ack", "played_ms": 400, "response_id": "r"},
			&session.PlaybackAck{Base: session.Base{Kind: "audio.playback_ack"}, PlayedMs: 400, ResponseID: "r"}},
		{"signal_turn barge_in", map[string]any{"type": "signal_turn", "event": "barge_in"}, &session.BargeIn{Base: session.Base{Kind: "turn.signal"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, werr := vllm.New().Decode(frame(t, tc.ev))
			require.Nil(t, werr)
			require.Equal(t, tc.want, got)
		})
	}
}

// answerer is a command its dialect answers itself (the connection's selfAnswered).
type answerer interface {
	Answer() ([]protocol.ServerEvent, []session.Command)
}

// apply decodes ev on tr as the connection does and returns the commands the session gets.
func apply(t *testing.T, tr *vllm.Translator, ev map[string]any) []session.Command {
	t.Helper()
	cmd, werr := tr.Decode(frame(t, ev))
	require.Nil(t, werr)
	if a, ok := cmd.(answerer); ok {
		evs, cmds := a.Answer()
		require.Empty(t, evs)
		return cmds
	}
	return []session.Command{cmd}
}

// input.text.append joins the open input item: nothing reaches the session until the commit,
// which makes the joined text (trimmed) one user item before what it does with the audio: text
// alone is answered by a response of its own when one is asked for (there is no audio to
// commit), and committed only when not; audio is committed with its response. A clear drops
// the text; response.create takes it along too.
func TestInputCommitAnswersTheInput(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString([]byte{0, 0})
	text := func(typ, s string) map[string]any { return map[string]any{"type": typ, "text": s} }
	appendEv := map[string]any{"type": "input_audio_buffer.append", "audio": b64}
	commit := map[string]any{"type": "input.commit", "event_id": "c"}
	item := func(s string) *session.CreateItem {
		return &session.CreateItem{Base: session.Base{ID: "c", Kind: "input.text.append"}, Role: "user", Text: s}
	}
	base := session.Base{ID: "c", Kind: "input.commit"}
	tests := []struct {
		name   string
		before []map[string]any
		commit map[string]any
		want   []session.Command
	}{
		{"text joined", []map[string]any{text("input.text.append", " what is "), text("push_text", "the"), text("input_text.append", " weather ")}, commit,
			[]session.Command{item("what is the weather"), &session.CreateResponse{Base: base}}},
		{"text, response_create false", []map[string]any{text("push_text", "hi")},
			map[string]any{"type": "input.commit", "event_id": "c", "response_create": false}, []session.Command{item("hi")}},
		{"text and audio", []map[string]any{text("push_text", "hi"), appendEv}, commit,
			[]session.Command{item("hi"), &session.CommitInput{Base: base, ResponseCreate: ptr(true), AcceptConsumed: true}}},
		{"text committed already", []map[string]any{text("push_text", "hi"), commit}, commit,
			[]session.Command{&session.CommitInput{Base: base, ResponseCreate: ptr(true)}}},
		{"text, then a clear", []map[string]any{text("push_text", "hi"), {"type": "input_audio_buffer.clear"}}, commit,
			[]session.Command{&session.CommitInput{Base: base, ResponseCreate: ptr(true)}}},
		{"blank text", []map[string]any{text("push_text", "  ")}, commit,
			[]session.Command{&session.CommitInput{Base: base, ResponseCreate: ptr(true)}}},
		{"response.create takes the text", []map[string]any{text("push_text", "hi")}, map[string]any{"type": "response.create", "event_id": "c"},
			[]session.Command{item("hi"), &session.CreateResponse{Base: session.Base{ID: "c", Kind: "response.create"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := vllm.New()
			for _, ev := range tc.before {
				cmds := apply(t, tr, ev)
				if ev["type"] != "input.commit" && ev["type"] != "input_audio_buffer.append" && ev["type"] != "input_audio_buffer.clear" {
					require.Len(t, cmds, 1, "an append of text reaches the session only with the commit")
					require.IsType(t, &session.InputActivity{}, cmds[0], "its activity does (the idle timeout)")
				}
			}
			require.Equal(t, tc.want, apply(t, tr, tc.commit))
		})
	}
}

// Refusals carry vllm-omni's codes, from the decoder and from the session alike.
func TestVLLMErrorCodes(t *testing.T) {
	tests := []struct {
		name  string
		ev    map[string]any
		code  string
		param string
	}{
		{"text append without text", map[string]any{"type": "push_text"}, "bad_event", "text"},
		{"commit flag not a boolean", map[string]any{"type": "input.commit", "response_create": "yes"}, "invalid_type", "response_create"},
		{"WAV that is not one", map[string]any{"type": "push_chunk", "audio": base64.StdEncoding.EncodeToString([]byte("RIFFnope"))}, "bad_audio", "audio"},
		{"unknown event", map[string]any{"type": "no.such.event"}, "unknown_event", "type"},
		{"response speed", map[string]any{"type": "response.create", "response": map[string]any{"speed": 1.5}}, "unsupported_response_option", "response.speed"},
		{"response temperature above 2", map[string]any{"type": "response.create", "response": map[string]any{"temperature": 2.5}}, "invalid_value", "response.temperature"},
		{"response temperature negative", map[string]any{"type": "response.create", "response": map[string]any{"temperature": -0.1}}, "invalid_value", "response.temperature"},
		{"response temperature not a number", map[string]any{"type": "response.create", "response": map[string]any{"temperature": "hot"}}, "invalid_value", "response.temperature"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd, werr := vllm.New().Decode(frame(t, tc.ev))
			require.Nil(t, cmd)
			require.NotNil(t, werr)
			require.Equal(t, tc.code, werr.Code)
			require.Equal(t, tc.param, werr.Param)
		})
	}
	// temperature is this response's own, with the rest of the response as OpenAI's.
	cmd, werr := vllm.New().Decode(frame(t, map[string]any{"type": "response.create", "event_id": "e1",
		"response": map[string]any{"temperature": 0.7, "speed": 1, "max_output_tokens": 9}}))
	require.Nil(t, werr)
	cr := cmd.(*session.CreateResponse)
	require.Empty(t, cr.Unsupported)
	require.NotNil(t, cr.Temperature)
	require.InDelta(t, 0.7, *cr.Temperature, 1e-9)
	require.Equal(t, "e1", cr.ID)
	require.Equal(t, 9, *cr.MaxOutputTokens)
	cmd, werr = vllm.New().Decode(frame(t, map[string]any{"type": "response.create"}))
	require.Nil(t, werr)
	require.Nil(t, cmd.(*session.CreateResponse).Temperature)
	for openAI, want := range map[string]string{
		"input_audio_buffer_commit_empty":          "input_audio_buffer_empty",
		"item_retrieve_invalid_item_id":            "item_not_found",
		"item_delete_invalid_item_id":              "item_not_found",
		"item_truncate_invalid_item_id":            "item_not_found",
		"response_cancel_not_active":               "response_not_active",
		"conversation_already_has_active_response": "response_already_active",
		"session_not_found":                        "session_resume_expired",
		"missing_required_parameter":               "bad_event",
		"invalid_value":                            "invalid_value",
	} {
		ev, ok := vllm.New().Encode(session.Error{Type: "invalid_request_error", Code: openAI, Message: "m", EventID: "e"})
		require.True(t, ok)
		er, ok := ev.(protocol.ErrorEvent)
		require.True(t, ok)
		require.Equal(t, want, er.Error.Code, openAI)
		require.Equal(t, "e", *er.Error.EventID)
	}
}

// The idle timeout ends a session with vllm-omni's session.expired {session_id, reason:
// "idle_ttl_expired"}; every other end is session.closed with its reason.
func TestIdleTimeoutIsSessionExpired(t *testing.T) {
	ev, ok := vllm.New().Encode(session.SessionClosed{SessionID: "duplex-1", Reason: session.ReasonTimeout})
	require.True(t, ok)
	require.Equal(t, "session.expired", ev.EventType())
	b, err := json.Marshal(ev)
	require.NoError(t, err)
	require.JSONEq(t, `{"reason":"idle_ttl_expired","session_id":"duplex-1"}`, string(b))
	for _, reason := range []string{session.ReasonClientClose, session.ReasonShutdown, "too_many_invalid_events"} {
		ev, ok := vllm.New().Encode(session.SessionClosed{SessionID: "duplex-1", Reason: reason})
		require.True(t, ok)
		require.Equal(t, "session.closed", ev.EventType(), reason)
	}
}

// The overlap thresholds: omniserve's values are accepted (nothing reaches OpenAI's decoder, which
// would drop them), any other is refused naming its key.
func TestOverlapThresholds(t *testing.T) {
	for _, tc := range []struct {
		session map[string]any
		code    string
		param   string
	}{
		{map[string]any{"overlap_barge_in_ms": 1200, "overlap_short_ack_ms": 700, "overlap_silence_rms": 0.003}, "", ""},
		{map[string]any{"overlap_barge_in_ms": 2000}, "unsupported_value", "session.overlap_barge_in_ms"},
		{map[string]any{"overlap_short_ack_ms": 0}, "unsupported_value", "session.overlap_short_ack_ms"},
		{map[string]any{"overlap_silence_rms": 0.01}, "unsupported_value", "session.overlap_silence_rms"},
		{map[string]any{"overlap_barge_in_ms": "long"}, "invalid_type", "session.overlap_barge_in_ms"},
	} {
		_, werr := vllm.New().Decode(frame(t, map[string]any{"type": "session.update", "session": tc.session}))
		if tc.code == "" {
			require.Nil(t, werr, "%v", tc.session)
			continue
		}
		require.NotNil(t, werr, "%v", tc.session)
		require.Equal(t, tc.code, werr.Code)
		require.Equal(t, tc.param, werr.Param)
	}
}
