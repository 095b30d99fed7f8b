package live

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// mediaSession is a WebRTC session's config: MediaSessionConfig has no audio.format.
func mediaSession() map[string]any {
	return map[string]any{"model": "gpt-live-1", "instructions": "Be concise.", "audio": map[string]any{"output": map[string]any{"voice": "marin"}}}
}

func rawJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// The POST's session is checked as session.start's is, as MediaSessionConfig: audio.format is
// an unknown parameter (negotiated in the SDP), and client permissions are refused by name.
func TestStartMediaRefusals(t *testing.T) {
	tests := []struct {
		name, code, param string
		session           any
	}{
		{"no session", "missing_required_parameter", "session", nil},
		{"no model", "missing_required_parameter", "session.model", map[string]any{"instructions": "x"}},
		{"typo", "unknown_parameter", "session.temprature", with(mediaSession(), "temprature", 1)},
		{"audio.format", "unknown_parameter", "session.audio.format", with(mediaSession(), "audio", map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 24000}})},
		{"client permissions", "invalid_value", "session.client", with(mediaSession(), "client", map[string]any{"data_channel": map[string]any{}})},
		{"unknown voice", "invalid_value", "session.audio.output.voice", with(mediaSession(), "audio", map[string]any{"output": map[string]any{"voice": "bob"}})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := New(Options{})
			var raw json.RawMessage
			if tc.session != nil {
				raw = rawJSON(t, tc.session)
			}
			cmds, werr := tr.StartMedia(raw)
			require.Nil(t, cmds)
			require.NotNil(t, werr)
			require.Equal(t, tc.code, werr.Code, werr.Message)
			require.Equal(t, tc.param, werr.Param, werr.Message)
			require.Empty(t, tr.Model())
		})
	}
}

// A WebRTC session: started by the POST (session.started answers its update, with the format
// the call's audio has on the timeline), its microphone advancing the timeline and reflected
// first, its reply's frames for the call's player and reflected with their place on the track,
// and what only a WebSocket client sends refused.
func TestMediaSession(t *testing.T) {
	tr := New(Options{})
	cmds, werr := tr.StartMedia(rawJSON(t, mediaSession()))
	require.Nil(t, werr)
	require.Equal(t, "gpt-live-1", tr.Model())
	up := cmds[0].(*session.UpdateSession)
	require.Equal(t, session.AudioFormat{Type: "pcm16", Rate: MediaRate}, *up.Patch.InputFormat)
	require.Equal(t, session.AudioFormat{Type: "pcm16", Rate: MediaRate}, *up.Patch.OutputFormat)
	require.Empty(t, tr.EncodeAll(session.SessionCreated{View: session.SessionView{ID: "duplex-abc"}}))
	evs := tr.EncodeAll(session.SessionUpdated{})
	require.Len(t, evs, 1)
	require.Equal(t, "session.started", evs[0].EventType())
	require.Equal(t, "live_abc", evs[0].(sessionEvent).Session.ID)
	require.Equal(t, SessionID("duplex-abc"), "live_abc")

	for _, tc := range []struct {
		typ, key, code, param string
		val                   any
	}{
		{"session.start", "session", "session_already_started", "", mediaSession()},
		{"session.input_audio.append", "audio", "invalid_value", "type", "AAAA"},
	} {
		_, werr := tr.Decode(frame(t, map[string]any{"type": tc.typ, "event_id": "e", tc.key: tc.val}))
		require.NotNil(t, werr, tc.typ)
		require.Equal(t, tc.code, werr.Code, tc.typ)
		require.Equal(t, tc.param, werr.Param, tc.typ)
		require.Equal(t, "e", werr.EventID, tc.typ)
	}

	// An append's ack comes due on the microphone's timeline; muted, the session hears silence
	// but the sideband gets the real audio.
	_, werr = tr.Decode(frame(t, map[string]any{"type": "session.thinking.append", "event_id": "th", "content": "context", "delegation_id": nil}))
	require.Nil(t, werr)
	_, werr = tr.Decode(frame(t, map[string]any{"type": "session.input_audio.mute"}))
	require.Nil(t, werr)
	loud := make([]byte, 2*MediaRate/5) // 200 ms
	for i := range loud {
		loud[i] = 0x40
	}
	reply := tr.TakeMedia(loud)
	require.NotNil(t, reply)
	require.Equal(t, []protocol.ServerEvent{reflectedInput{Audio: loud},
		appendedEvent{kind: "session.thinking.appended", ClientEventID: "th", StartMs: 0, EndMs: 200}}, reply.Events)
	require.Equal(t, make([]byte, len(loud)), reply.Commands[0].(*session.AppendAudio).Data, "muted: the session hears silence")

	frameAudio := make([]byte, 4800) // 100 ms of the talker's 24 kHz
	evs = tr.EncodeAll(session.OutputDelta{Kind: session.PartAudio, ResponseID: "resp_1", ItemID: "item_1", Audio: frameAudio,
		Format: session.AudioFormat{Type: "pcm16", Rate: 24000}, DurationMs: 100})
	require.Equal(t, []protocol.ServerEvent{
		protocol.ResponseOutputAudioDelta{Delta: base64.StdEncoding.EncodeToString(frameAudio), Format: "pcm16", SampleRateHz: 24000,
			ResponseID: "resp_1", ItemID: "item_1", AudioDurationMs: 100},
		reflectedOutput{Delta: frameAudio, StartMs: 200, EndMs: 300},
	}, evs)
	require.True(t, SidebandOnly(evs[1].EventType()))
	require.True(t, SidebandOnly("session.input_audio.append"))
	require.False(t, SidebandOnly(evs[0].EventType()), "the player's frame")
	require.False(t, SidebandOnly("session.output_transcript.delta"))
}

// Audio before the session has started (its start refused) is dropped.
func TestTakeMediaBeforeStart(t *testing.T) {
	require.Nil(t, New(Options{}).TakeMedia(make([]byte, 960)))
}
