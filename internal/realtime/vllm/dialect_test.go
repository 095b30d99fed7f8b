package vllm_test

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/realtime/vllm"
	"github.com/omniserve/omniserve/internal/session"
)

// A commit's meaning in vllm-omni's dialect: response_create false is absent (the engine
// decides), input.commit asks for a response, a commit after audio accepts audio the engine
// already took, is_speech false is a silence commit, final false is refused by name.
func TestCommitMeaning(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString(make([]byte, 3200))
	appendEv := map[string]any{"type": "input_audio_buffer.append", "audio": b64, "sample_rate_hz": 16000}
	tests := []struct {
		name   string
		before []map[string]any
		ev     map[string]any
		want   *session.CommitInput
		code   string
	}{
		{"response_create false is absent", nil, map[string]any{"type": "input_audio_buffer.commit", "response_create": false},
			&session.CommitInput{Base: session.Base{Kind: "input_audio_buffer.commit"}, OverlapTiers: true}, ""},
		{"create_response true", nil, map[string]any{"type": "input_audio_buffer.commit", "create_response": true},
			&session.CommitInput{Base: session.Base{Kind: "input_audio_buffer.commit"}, ResponseCreate: ptr(true), OverlapTiers: true}, ""},
		{"input.commit false: the engine decides", nil, map[string]any{"type": "input.commit", "response_create": false},
			&session.CommitInput{Base: session.Base{Kind: "input.commit"}}, ""},
		{"input.commit absent: a response", nil, map[string]any{"type": "input.commit"},
			&session.CommitInput{Base: session.Base{Kind: "input.commit"}, ResponseCreate: ptr(true)}, ""},
		{"after audio: consumed audio accepted", []map[string]any{appendEv}, map[string]any{"type": "input_audio_buffer.commit", "final": true},
			&session.CommitInput{Base: session.Base{Kind: "input_audio_buffer.commit"}, AcceptConsumed: true, OverlapTiers: true}, ""},
		{"is_speech false after audio: silence", []map[string]any{appendEv}, map[string]any{"type": "input_audio_buffer.commit", "is_speech": false},
			&session.CommitInput{Base: session.Base{Kind: "input_audio_buffer.commit"}, AcceptConsumed: true, Silence: true, OverlapTiers: true}, ""},
		{"is_speech false with nothing appended: a plain (empty) commit", nil, map[string]any{"type": "input_audio_buffer.commit", "is_speech": false},
			&session.CommitInput{Base: session.Base{Kind: "input_audio_buffer.commit"}, OverlapTiers: true}, ""},
		{"final false refused", nil, map[string]any{"type": "input_audio_buffer.commit", "final": false}, nil, "unsupported_value"},
		{"is_speech not a boolean", nil, map[string]any{"type": "input_audio_buffer.commit", "is_speech": "no"}, nil, "invalid_type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := vllm.New()
			for _, ev := range tc.before {
				_, werr := tr.Decode(frame(t, ev))
				require.Nil(t, werr)
			}
			got, werr := tr.Decode(frame(t, tc.ev))
			if tc.code != "" {
				require.NotNil(t, werr)
				require.Equal(t, tc.code, werr.Code)
				return
			}
			require.Nil(t, werr)
			require.Equal(t, tc.want, got)
		})
	}
}

// vllm-omni's session keys are honoured or refused by name, never dropped.
func TestSessionKeys(t *testing.T) {
	tests := []struct {
		name    string
		session map[string]any
		code    string
		param   string
	}{
		{"MiniCPM-o preset", map[string]any{"ref_audio": "data:audio/wav;base64,UklGRg==", "overlap_policy": "listen_only",
			"playback_commit_policy": "ack_only", "turn_detection": nil,
			"extra_body": map[string]any{"auto_response": true, "minicpmo45_native_duplex": true, "force_listen_count": 0}}, "", ""},
		{"barge_in_on_speech with interrupt_response", map[string]any{"overlap_policy": "barge_in_on_speech",
			"turn_detection": map[string]any{"type": "server_vad", "interrupt_response": true}}, "", ""},
		{"barge_in_on_speech without turn detection", map[string]any{"overlap_policy": "barge_in_on_speech", "turn_detection": nil}, "unsupported_value", "session.overlap_policy"},
		{"overlap auto", map[string]any{"overlap_policy": "auto"}, "unsupported_value", "session.overlap_policy"},
		{"playback policy unknown", map[string]any{"playback_commit_policy": "never"}, "invalid_value", "session.playback_commit_policy"},
		{"force_listen_count 2", map[string]any{"extra_body": map[string]any{"force_listen_count": 2}}, "unsupported_value", "session.extra_body.force_listen_count"},
		{"stage metrics", map[string]any{"extra_body": map[string]any{"return_stage_metrics": true}}, "unsupported_value", "session.extra_body.return_stage_metrics"},
		{"initial user text", map[string]any{"extra_body": map[string]any{"duplex_initial_user_text": "hi"}}, "unsupported_value", "session.extra_body.duplex_initial_user_text"},
		{"ref_audio not a string", map[string]any{"ref_audio": 3}, "invalid_type", "session.ref_audio"},
		{"sample rate zero", map[string]any{"sample_rate_hz": 0}, "invalid_value", "session.sample_rate_hz"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd, werr := vllm.New().Decode(frame(t, map[string]any{"type": "session.update", "session": tc.session}))
			if tc.code == "" {
				require.Nil(t, werr)
				require.IsType(t, &session.UpdateSession{}, cmd)
				return
			}
			require.Nil(t, cmd)
			require.NotNil(t, werr)
			require.Equal(t, tc.code, werr.Code)
			require.Equal(t, tc.param, werr.Param)
		})
	}
}

// The input rate: 16 kHz on the first update unless named (sample_rate_hz, audio.input's, or a
// pcm16 format without a rate, which is 16 kHz in vllm-omni); a later update keeps what is set.
func TestInputRate(t *testing.T) {
	rate := func(tr *vllm.Translator, s map[string]any) int {
		cmd, werr := tr.Decode(frame(t, map[string]any{"type": "session.update", "session": s}))
		require.Nil(t, werr)
		f := cmd.(*session.UpdateSession).Patch.InputFormat
		if f == nil {
			return 0
		}
		return f.Rate
	}
	tr := vllm.New()
	require.Equal(t, 16000, rate(tr, map[string]any{"instructions": "x"}))
	require.Equal(t, 0, rate(tr, map[string]any{"instructions": "y"}), "a later update leaves the rate")
	require.Equal(t, 24000, rate(vllm.New(), map[string]any{"sample_rate_hz": 24000}))
	require.Equal(t, 48000, rate(vllm.New(), map[string]any{"audio": map[string]any{"input": map[string]any{"sample_rate_hz": 48000}}}))
	require.Equal(t, 16000, rate(vllm.New(), map[string]any{"input_audio_format": "pcm16"}))
	cmd, werr := vllm.New().Decode(frame(t, map[string]any{"type": "session.update", "session": map[string]any{"input_audio_format": "g711_ulaw"}}))
	require.Nil(t, werr)
	require.Zero(t, cmd.(*session.UpdateSession).Patch.InputFormat.Rate, "G.711 keeps its 8 kHz")
}

// encoded is the JSON object of the server event the translator makes of effect e.
func encoded(t *testing.T, tr *vllm.Translator, e session.Effect) map[string]any {
	t.Helper()
	ev, ok := tr.Encode(e)
	if !ok {
		return nil
	}
	b, err := protocol.Encode(ev, protocol.Envelope{Type: ev.EventType(), EventID: "ev", Seq: 1}, false)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

// The engine's listen is told once per unit (1 s) of appended audio; a listen with a reason
// always; each carries metadata.reason.
func TestListenOncePerUnit(t *testing.T) {
	tr := vllm.New()
	listen := session.TurnDecision{SessionID: "s", Epoch: 2}
	require.Nil(t, encoded(t, tr, listen), "no audio heard yet")
	chunk := frame(t, map[string]any{"type": "input_audio_buffer.append", "sample_rate_hz": 16000,
		"audio": base64.StdEncoding.EncodeToString(make([]byte, 3200))}) // 100 ms
	told := 0
	for range 30 { // 3 s of audio, a listen decision per chunk
		_, werr := tr.Decode(chunk)
		require.Nil(t, werr)
		if m := encoded(t, tr, listen); m != nil {
			told++
			md := m["response"].(map[string]any)["metadata"].(map[string]any)
			require.Equal(t, "model_listen", md["reason"])
			require.Equal(t, true, md["model_listen"])
		}
	}
	require.Equal(t, 3, told)
	m := encoded(t, tr, session.TurnDecision{SessionID: "s", Reason: session.ReasonSilence})
	require.NotNil(t, m)
	require.Equal(t, "silence_or_noise", m["response"].(map[string]any)["metadata"].(map[string]any)["reason"])
}

// vllm-omni's shapes: committed's event, playback.acknowledged's event, audio deltas'
// cumulative metadata, capabilities and the echoed keys in the session object.
func TestEventShapes(t *testing.T) {
	tr := vllm.New()
	_, werr := tr.Decode(frame(t, map[string]any{"type": "session.update", "session": map[string]any{"playback_commit_policy": "ack_only", "ref_audio": "data:x"}}))
	require.Nil(t, werr)
	m := encoded(t, tr, session.SessionCreated{View: session.SessionView{ID: "duplex-1"}})
	require.EqualValues(t, 1, m["attachment_generation"])
	require.EqualValues(t, 0, m["incarnation"])
	m = encoded(t, tr, session.SessionResumed{SessionID: "duplex-1", Session: session.SessionUpdated{View: session.SessionView{ID: "duplex-1"}}})
	require.EqualValues(t, 2, m["attachment_generation"], "+1 per resume")
	m = encoded(t, tr, session.SessionUpdated{View: session.SessionView{ID: "duplex-1"}})
	s := m["session"].(map[string]any)
	require.Equal(t, "ack_only", s["playback_commit_policy"])
	require.Equal(t, "data:x", s["ref_audio"])
	require.Equal(t, "listen_only", s["overlap_policy"])
	c := s["capabilities"].(map[string]any)
	require.EqualValues(t, 1000, c["chunk_period_ms"])
	require.Equal(t, "model_native_duplex", c["implementation_level"])

	m = encoded(t, tr, session.InputCommitted{ItemID: "item_1", Empty: true, NoResponse: true})
	require.Equal(t, "item_1", m["item_id"])
	ev := m["event"].(map[string]any)
	require.Equal(t, "input.committed", ev["type"])
	require.Equal(t, true, ev["empty"])
	require.Equal(t, true, ev["no_response"])

	require.Nil(t, ev["response_create_deferred"])
	encoded(t, tr, session.ResponseStarted{Response: session.ResponseInfo{ID: "r0", Status: "in_progress"}})
	m = encoded(t, tr, session.InputCommitted{ItemID: "item_2"})
	ev = m["event"].(map[string]any)
	require.Equal(t, true, ev["response_create_deferred"], "committed while a response runs")
	require.Equal(t, true, ev["overlap_deferred"])
	require.Nil(t, ev["overlap_ack"])
	m = encoded(t, tr, session.InputCommitted{ItemID: "item_3", Empty: true, NoResponse: true, OverlapAck: true})
	ev = m["event"].(map[string]any)
	for _, flag := range []string{"empty", "overlap_ack", "no_response"} {
		require.Equal(t, true, ev[flag], flag)
	}
	require.Equal(t, false, ev["is_speech"], "an acknowledgement is not a turn's speech")
	require.Nil(t, ev["response_create_deferred"], "an acknowledgement is not answered")
	encoded(t, tr, session.ResponseDone{Response: session.ResponseInfo{ID: "r0", Status: "completed"}})

	m = encoded(t, tr, session.PlaybackAcknowledged{ResponseID: "r", ItemID: "item_r", PlayedMs: 900, SentMs: 1000, CommittedMs: 800, Truncated: true})
	ev = m["event"].(map[string]any)
	require.Equal(t, "playback.acknowledged", ev["type"])
	require.EqualValues(t, 800, ev["committed_ms"])
	require.Equal(t, false, ev["history_committed"])

	for i, want := range []float64{40, 80} {
		m = encoded(t, tr, session.OutputDelta{Kind: session.PartAudio, ResponseID: "r", ItemID: "item_r", Audio: []byte{0, 0},
			Format: session.AudioFormat{Type: "pcm16", Rate: 24000}, DurationMs: 40})
		require.EqualValues(t, 40, m["audio_duration_ms"], "chunk %d", i)
		require.EqualValues(t, want, m["metadata"].(map[string]any)["audio_duration_ms"], "chunk %d", i)
	}
}

// turn.signal with an event that asks for no action is answered with turn.event; the acting
// ones are OpenAI's commands.
func TestTurnSignal(t *testing.T) {
	tr := vllm.New()
	cmd, werr := tr.Decode(frame(t, map[string]any{"type": "signal_turn", "event_id": "s1", "event": "user_started"}))
	require.Nil(t, werr)
	require.Equal(t, &session.SignalTurn{Base: session.Base{ID: "s1", Kind: "signal_turn"}, Event: "user_started"}, cmd)
	cmd, werr = tr.Decode(frame(t, map[string]any{"type": "turn.signal", "event": "barge_in"}))
	require.Nil(t, werr)
	require.IsType(t, &session.BargeIn{}, cmd)
	m := encoded(t, tr, session.TurnSignaled{SessionID: "s", Event: "user_started", TurnState: "idle", Epoch: 3})
	require.Equal(t, "turn.event", m["type"])
	require.Equal(t, "user_started", m["event"])
	require.Equal(t, "idle", m["turn_state"])
	require.EqualValues(t, 3, m["epoch"])
}
