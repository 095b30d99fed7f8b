package live

import (
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

func frame(t *testing.T, ev map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(ev)
	require.NoError(t, err)
	return b
}

func quickStart() map[string]any {
	return map[string]any{
		"model":        "gpt-live-1",
		"instructions": "Be concise.",
		"audio":        map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 24000}, "output": map[string]any{"voice": "marin"}},
		"delegation":   map[string]any{"type": "responses", "responses": map[string]any{"model": "gpt-5.6-luna", "tools": []any{map[string]any{"type": "web_search"}}}},
	}
}

// with is m with key set to v (a copy; nested maps are shared).
func with(m map[string]any, key string, v any) map[string]any {
	out := map[string]any{}
	for k, x := range m {
		out[k] = x
	}
	out[key] = v
	return out
}

// session.start's config is strict: every unknown key, at any depth, is refused by its dotted
// path; every value omniserve cannot honour is refused by name.
func TestStartConfigRefusals(t *testing.T) {
	pcm := func(typ string, rate int) map[string]any {
		return map[string]any{"format": map[string]any{"type": typ, "rate": rate}}
	}
	tests := []struct {
		name, code, param string
		session           any
	}{
		{"no session", "missing_required_parameter", "session", nil},
		{"no model", "missing_required_parameter", "session.model", map[string]any{}},
		{"top-level typo", "unknown_parameter", "session.temprature", with(quickStart(), "temprature", 1)},
		{"voice's sibling", "unknown_parameter", "session.audio.output.speed", with(quickStart(), "audio", map[string]any{"output": map[string]any{"voice": "marin", "speed": 1}})},
		{"format's sibling", "unknown_parameter", "session.audio.format.channels", with(quickStart(), "audio", map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 24000, "channels": 1}})},
		{"in a list", "unknown_parameter", "session.input[1].foo", with(quickStart(), "input", []any{
			map[string]any{"role": "user", "content": []any{map[string]any{"text": "a"}}},
			map[string]any{"role": "user", "foo": 1, "content": []any{map[string]any{"text": "b"}}}})},
		{"in responses", "unknown_parameter", "session.delegation.responses.temperature", with(quickStart(), "delegation",
			map[string]any{"type": "responses", "responses": map[string]any{"model": "m", "temperature": 1}})},
		{"in a function tool", "unknown_parameter", "session.delegation.responses.tools[0].handler", with(quickStart(), "delegation",
			map[string]any{"type": "responses", "responses": map[string]any{"model": "m", "tools": []any{map[string]any{"type": "function", "name": "f", "handler": "x"}}}})},
		{"44.1 kHz", "invalid_value", "session.audio.format.rate", with(quickStart(), "audio", pcm("audio/pcm", 44100))},
		{"μ-law at 16 kHz", "invalid_value", "session.audio.format.rate", with(quickStart(), "audio", pcm("audio/pcmu", 16000))},
		{"opus", "invalid_value", "session.audio.format.type", with(quickStart(), "audio", pcm("audio/opus", 48000))},
		{"rate as a string", "invalid_type", "session.audio.format.rate", with(quickStart(), "audio", map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": "24000"}})},
		{"unknown voice", "invalid_value", "session.audio.output.voice", with(quickStart(), "audio", map[string]any{"output": map[string]any{"voice": "bob"}})},
		{"decisions", "invalid_value", "session.delegation.type", with(quickStart(), "delegation", map[string]any{"type": "decisions", "decisions": map[string]any{"model": "m"}})},
		{"responses without a model", "missing_required_parameter", "session.delegation.responses.model", with(quickStart(), "delegation", map[string]any{"type": "responses", "responses": map[string]any{}})},
		{"max_output_tokens under 16", "invalid_value", "session.delegation.responses.max_output_tokens", with(quickStart(), "delegation", map[string]any{"type": "responses", "responses": map[string]any{"model": "m", "max_output_tokens": 8}})},
		{"store", "invalid_value", "session.store", with(quickStart(), "store", true)},
		{"triggers", "invalid_value", "session.triggers", with(quickStart(), "triggers", []any{map[string]any{"type": "decisions"}})},
		{"client (WebRTC)", "invalid_value", "session.client", with(quickStart(), "client", map[string]any{})},
		{"system role", "invalid_value", "session.input[0].role", with(quickStart(), "input", []any{map[string]any{"role": "system", "content": []any{map[string]any{"text": "a"}}}})},
		{"two parts", "invalid_value", "session.input[0].content", with(quickStart(), "input", []any{map[string]any{"role": "user", "content": []any{map[string]any{"text": "a"}, map[string]any{"text": "b"}}}})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := New(Options{})
			ev := map[string]any{"type": "session.start", "event_id": "e"}
			if tc.session != nil {
				ev["session"] = tc.session
			}
			cmd, werr := tr.Decode(frame(t, ev))
			require.Nil(t, cmd)
			require.NotNil(t, werr)
			require.Equal(t, tc.code, werr.Code, werr.Message)
			require.Equal(t, tc.param, werr.Param, werr.Message)
			require.Equal(t, "e", werr.EventID)
			// The socket stays open for a corrected start.
			cmd, werr = tr.Decode(frame(t, map[string]any{"type": "session.start", "session": quickStart()}))
			require.Nil(t, werr)
			require.NotNil(t, cmd)
		})
	}
}

// The formats Live allows map onto the session's, one format both ways; 16 kHz PCM output is
// resampled from the talker's 24 kHz.
func TestStartFormats(t *testing.T) {
	tests := []struct {
		typ       string
		rate      int
		in, out   session.AudioFormat
		resampled bool
	}{
		{"audio/pcm", 24000, session.AudioFormat{Type: "pcm16", Rate: 24000}, session.AudioFormat{Type: "pcm16", Rate: 24000}, false},
		{"audio/pcm", 16000, session.AudioFormat{Type: "pcm16", Rate: 16000}, session.AudioFormat{Type: "pcm16", Rate: 24000}, true},
		{"audio/pcmu", 8000, session.AudioFormat{Type: "g711_ulaw", Rate: 8000}, session.AudioFormat{Type: "g711_ulaw", Rate: 8000}, false},
		{"audio/pcma", 8000, session.AudioFormat{Type: "g711_alaw", Rate: 8000}, session.AudioFormat{Type: "g711_alaw", Rate: 8000}, false},
	}
	for _, tc := range tests {
		t.Run(tc.typ, func(t *testing.T) {
			tr := New(Options{})
			cmd, werr := tr.Decode(frame(t, map[string]any{"type": "session.start", "session": with(quickStart(), "audio",
				map[string]any{"format": map[string]any{"type": tc.typ, "rate": tc.rate}})}))
			require.Nil(t, werr)
			_, cmds := cmd.(*Reply).Answer()
			up := cmds[0].(*session.UpdateSession)
			require.Equal(t, tc.in, *up.Patch.InputFormat)
			require.Equal(t, tc.out, *up.Patch.OutputFormat)
			require.Equal(t, tc.resampled, tr.out.resampler != nil)
		})
	}
}

// start runs tr's start handshake as the session answers it: session.created (dropped), the
// update's session.updated (session.started).
func start(t *testing.T, tr *Translator, sess map[string]any) map[string]any {
	t.Helper()
	cmd, werr := tr.Decode(frame(t, map[string]any{"type": "session.start", "event_id": "s", "session": sess}))
	require.Nil(t, werr)
	_, cmds := cmd.(*Reply).Answer()
	require.IsType(t, &session.UpdateSession{}, cmds[0])
	require.Empty(t, tr.EncodeAll(session.SessionCreated{View: session.SessionView{ID: "duplex-abc", ExpiresAt: time.Unix(1800000000, 0)}}), "nothing before session.started")
	evs := tr.EncodeAll(session.SessionUpdated{})
	require.Len(t, evs, 1)
	b, err := protocol.Encode(evs[0], protocol.Envelope{Type: evs[0].EventType(), EventID: "x"}, false)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, "session.started", m["type"])
	require.Equal(t, "s", m["client_event_id"])
	return m["session"].(map[string]any)
}

// The resolved snapshot: the requested model, the session's id under Live's prefix, the
// defaults filled in (format, input, voice, delegation).
func TestStartedSnapshot(t *testing.T) {
	tr := New(Options{})
	res := start(t, tr, map[string]any{"model": "gpt-live-1"})
	require.Equal(t, "live_abc", res["id"])
	require.Equal(t, 1800000000.0, res["expires_at"])
	require.Equal(t, "active", res["status"])
	require.Equal(t, "gpt-live-1", res["model"])
	require.Equal(t, []any{}, res["input"])
	require.Equal(t, map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 24000.0}, "output": map[string]any{"voice": "marin"}}, res["audio"])
	require.Equal(t, map[string]any{"type": "client", "acknowledgement_delay_ms": 0.0}, res["delegation"])
	// A second start is refused; the refusal of a start by the session reopens it.
	_, werr := tr.Decode(frame(t, map[string]any{"type": "session.start", "event_id": "again", "session": quickStart()}))
	require.Equal(t, "session_already_started", werr.Code)
	tr2 := New(Options{})
	_, werr = tr2.Decode(frame(t, map[string]any{"type": "session.start", "event_id": "s1", "session": with(quickStart(), "model", "nope")}))
	require.Nil(t, werr)
	evs := tr2.EncodeAll(session.Error{Type: "invalid_request_error", Code: "model_not_found", Param: "session.model", Message: "m", EventID: tr2.startID})
	require.Equal(t, ErrorEvent{ClientEventID: "s1", Error: ErrorBody{ClientEventID: "s1", Type: "invalid_request_error", Code: "model_not_found", Param: "session.model", Message: "m"}}, evs[0])
	_, werr = tr2.Decode(frame(t, map[string]any{"type": "session.start", "session": quickStart()}))
	require.Nil(t, werr, "a corrected start is accepted")
}

func appendFrame(t *testing.T, n int) []byte {
	return frame(t, map[string]any{"type": "session.input_audio.append", "audio": base64.StdEncoding.EncodeToString(make([]byte, n))})
}

// The timeline advances with the input audio only: an append's ack goes out once it reaches
// end_ms, usage every 15 s of it; mute replaces the audio with silence and the clock runs.
func TestTimeline(t *testing.T) {
	tr := New(Options{ContextTokens: 1000})
	_, werr := tr.Decode(appendFrame(t, 4800))
	require.Equal(t, "session_not_started", werr.Code)
	start(t, tr, with(quickStart(), "delegation", nil))
	cmd, werr := tr.Decode(frame(t, map[string]any{"type": "session.thinking.append", "event_id": "th", "content": "context", "delegation_id": nil}))
	require.Nil(t, werr)
	require.Equal(t, &session.CreateItem{Base: session.Base{ID: "th", Kind: "session.thinking.append"}, Role: "system",
		Text: "Background context (do not say it unless asked): context"}, cmd)
	cmd, werr = tr.Decode(appendFrame(t, 4800)) // 100 ms
	require.Nil(t, werr)
	evs, cmds := cmd.(*Reply).Answer()
	require.Empty(t, evs, "not due at 100 ms")
	require.Len(t, cmds, 1)
	cmd, _ = tr.Decode(appendFrame(t, 4800)) // 200 ms
	evs, _ = cmd.(*Reply).Answer()
	require.Equal(t, []protocol.ServerEvent{appendedEvent{kind: "session.thinking.appended", ClientEventID: "th", StartMs: 0, EndMs: 200}}, evs)

	cmd, _ = tr.Decode(frame(t, map[string]any{"type": "session.input_audio.mute", "event_id": "m"}))
	evs, _ = cmd.(*Reply).Answer()
	require.Equal(t, []protocol.ServerEvent{ackEvent{kind: "session.input_audio.muted", ClientEventID: "m"}}, evs)
	tr.EncodeAll(session.ResponseDone{Response: session.ResponseInfo{Usage: &session.Usage{InputText: 200, OutputText: 50}}})
	loud := make([]byte, 48000*15-9600) // to 15 s
	for i := range loud {
		loud[i] = 0x40
	}
	cmd, _ = tr.Decode(frame(t, map[string]any{"type": "session.input_audio.append", "audio": base64.StdEncoding.EncodeToString(loud)}))
	evs, cmds = cmd.(*Reply).Answer()
	require.Equal(t, make([]byte, len(loud)), cmds[0].(*session.AppendAudio).Data, "muted: the model hears silence")
	require.Len(t, evs, 1)
	require.Equal(t, usageEvent{Usage: Usage{Seconds: 15}, ContextWindow: &ContextWindow{UsageRatio: 0.25}}, evs[0], "the context: the last reply's tokens of n_ctx")
}

// G.711 silence is the codec's zero, not byte 0.
func TestMutedG711IsSilence(t *testing.T) {
	require.Equal(t, []byte{0xFF, 0xFF}, silence(2, "g711_ulaw"))
	require.Equal(t, []byte{0xD5, 0xD5}, silence(2, "g711_alaw"))
	require.Equal(t, []byte{0, 0}, silence(2, "pcm16"))
}

// Input transcript deltas are stable words only: passed on as they come, the final's rest is
// flushed at completion, and a final that revised words already sent adds nothing.
func TestInputTranscriptNeverRetracts(t *testing.T) {
	tr := New(Options{})
	start(t, tr, quickStart())
	require.Empty(t, tr.EncodeAll(session.InputSpeech{Phase: session.PhaseStarted, AudioMs: 300}))
	delta := func(evs []protocol.ServerEvent) string {
		if len(evs) == 0 {
			return ""
		}
		return evs[0].(transcriptDelta).Delta
	}
	require.Equal(t, "go forward", delta(tr.EncodeAll(session.Transcription{Phase: session.PhaseDelta, ItemID: "a", Text: "go forward"})))
	require.Equal(t, " ten meters", delta(tr.EncodeAll(session.Transcription{Phase: session.PhaseCompleted, ItemID: "a", Text: "go forward ten meters"})))
	require.Equal(t, " go", delta(tr.EncodeAll(session.Transcription{Phase: session.PhaseDelta, ItemID: "b", Text: "go"})), "a new utterance is a word apart")
	require.Empty(t, tr.EncodeAll(session.Transcription{Phase: session.PhaseCompleted, ItemID: "b", Text: "no forward"}), "a revision cannot be retracted")
	require.Equal(t, " stop", delta(tr.EncodeAll(session.Transcription{Phase: session.PhaseCompleted, ItemID: "c", Text: "stop"})), "a whole utterance at its completion")
}

// A reply's first words are a word apart from the replies before; deltas are placed where their
// frame starts on the track.
func TestOutputTranscriptStream(t *testing.T) {
	tr := New(Options{})
	start(t, tr, quickStart())
	say := func(text string) transcriptDelta {
		tr.EncodeAll(session.OutputDelta{Kind: session.PartAudio, Audio: make([]byte, 4800), DurationMs: 100})
		return tr.EncodeAll(session.OutputDelta{Kind: session.PartTranscript, Text: text})[0].(transcriptDelta)
	}
	tr.EncodeAll(session.ResponseStarted{})
	require.Equal(t, transcriptDelta{kind: "session.output_transcript.delta", Delta: "hello", StartMs: 0, EndMs: 100}, say("hello"))
	require.Equal(t, " there", say(" there").Delta)
	require.Equal(t, int64(200), say("x").StartMs, "the track runs ahead of a frozen timeline")
	tr.EncodeAll(session.ResponseDone{})
	tr.EncodeAll(session.ResponseStarted{})
	require.Equal(t, " again", say("again").Delta)
}

// Commentary is spoken when the user has stopped and no reply plays; a refusal because a reply
// started meanwhile waits for the next chance.
func TestCommentaryWaitsForSilence(t *testing.T) {
	tr := New(Options{})
	start(t, tr, with(quickStart(), "delegation", nil))
	tr.EncodeAll(session.InputSpeech{Phase: session.PhaseStarted})
	_, werr := tr.Decode(frame(t, map[string]any{"type": "session.commentary.append", "content": "It is sunny.", "delegation_id": nil}))
	require.Nil(t, werr)
	cmd, _ := tr.Decode(appendFrame(t, 4800))
	_, cmds := cmd.(*Reply).Answer()
	require.Len(t, cmds, 1, "the user is speaking")
	tr.EncodeAll(session.InputSpeech{Phase: session.PhaseStopped})
	cmd, _ = tr.Decode(appendFrame(t, 4800))
	_, cmds = cmd.(*Reply).Answer()
	require.Len(t, cmds, 2)
	cr := cmds[1].(*session.CreateResponse)
	require.Empty(t, tr.EncodeAll(session.Error{Code: "conversation_already_has_active_response", EventID: cr.ID}))
	tr.EncodeAll(session.ResponseDone{})
	cmd, _ = tr.Decode(appendFrame(t, 4800))
	_, cmds = cmd.(*Reply).Answer()
	require.Len(t, cmds, 2, "asked again once the reply ended")
}

// The test hook: instructions holding the marker (stripped before the model) make the next
// user turn end in a client delegation, acknowledged aloud after the delay; the client answers
// with commentary carrying the delegation's id. Without test hooks the marker is plain text.
func TestScriptedDelegation(t *testing.T) {
	sess := with(with(quickStart(), "instructions", "Be brief. "+DelegateMarker), "delegation", map[string]any{"type": "client", "acknowledgement_delay_ms": 300})
	off := New(Options{})
	cmd, werr := off.Decode(frame(t, map[string]any{"type": "session.start", "session": sess}))
	require.Nil(t, werr)
	_, cmds := cmd.(*Reply).Answer()
	require.Contains(t, *cmds[0].(*session.UpdateSession).Patch.Instructions, DelegateMarker)

	tr := New(Options{TestHooks: true})
	cmd, werr = tr.Decode(frame(t, map[string]any{"type": "session.start", "session": sess}))
	require.Nil(t, werr)
	_, cmds = cmd.(*Reply).Answer()
	require.Equal(t, "Be brief.", *cmds[0].(*session.UpdateSession).Patch.Instructions)
	tr.EncodeAll(session.SessionUpdated{})
	tr.EncodeAll(session.InputSpeech{Phase: session.PhaseStarted, AudioMs: 100})
	evs := tr.EncodeAll(session.InputSpeech{Phase: session.PhaseStopped, AudioMs: 900})
	require.Len(t, evs, 1)
	dc := evs[0].(delegationCreated)
	require.Equal(t, int64(900), dc.OffsetMs)
	require.Equal(t, "client", dc.Delegation.Target)
	require.Equal(t, "delegation", dc.Delegation.Type)
	require.Regexp(t, "^item_", dc.Delegation.ID)
	var acked bool
	for range 5 { // 500 ms: the acknowledgement is due after 300 ms
		cmd, _ = tr.Decode(appendFrame(t, 4800))
		if _, cmds := cmd.(*Reply).Answer(); len(cmds) == 2 {
			require.Equal(t, ackInstructions, *cmds[1].(*session.CreateResponse).Instructions)
			acked = true
		}
	}
	require.True(t, acked)
	tr.EncodeAll(session.ResponseDone{})
	_, werr = tr.Decode(frame(t, map[string]any{"type": "session.commentary.append", "content": "Done: 3 results.", "delegation_id": dc.Delegation.ID}))
	require.Nil(t, werr)
}

// Responses delegation: a task needing a hosted tool fails as a task (response.event carrying
// response.failed, naming the tool), never the session; without it, response.* are refused.
// tasks_test.go has the tasks that run.
func TestResponsesDelegation(t *testing.T) {
	tr := New(Options{})
	start(t, tr, quickStart())
	cmd, werr := tr.Decode(frame(t, map[string]any{"type": "response.create", "event_id": "r"}))
	require.Nil(t, werr)
	evs, _ := cmd.(*Reply).Answer()
	ev := evs[0].(responseEvent)
	require.Equal(t, "response.failed", ev.Event["type"])
	require.Equal(t, "unsupported_tool", ev.Event["response"].(map[string]any)["error"].(map[string]any)["code"])
	require.Contains(t, ev.Event["response"].(map[string]any)["error"].(map[string]any)["message"], "web_search")
	_, werr = tr.Decode(frame(t, map[string]any{"type": "response.item.create", "item": map[string]any{}}))
	require.Equal(t, "item.type", werr.Param)

	client := New(Options{})
	start(t, client, with(quickStart(), "delegation", nil))
	for _, typ := range []string{"response.create", "response.item.create"} {
		_, werr = client.Decode(frame(t, map[string]any{"type": typ}))
		require.Equal(t, "invalid_value", werr.Code)
		require.Contains(t, werr.Message, "requires Responses delegation")
	}
}

// A 16 kHz session's output is the talker's 24 kHz resampled: 100 ms stays 100 ms.
func TestOutputResampledTo16k(t *testing.T) {
	tr := New(Options{})
	start(t, tr, with(quickStart(), "audio", map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 16000}}))
	var n int
	for range 5 {
		evs := tr.EncodeAll(session.OutputDelta{Kind: session.PartAudio, Audio: make([]byte, 4800), DurationMs: 100})
		n += len(evs[0].(audioDelta).Delta)
	}
	require.InDelta(t, 5*3200, n, 100)
}

// session.closed's reason is Live's for the session's: a client's close is close_requested,
// the idle timeout and expires_at are expired, anything else (a shutdown, a slow client, an
// internal error) connection_lost.
func TestClosedReasons(t *testing.T) {
	for _, tc := range []struct{ reason, live string }{
		{session.ReasonClientClose, "close_requested"},
		{session.ReasonExpired, "expired"},
		{session.ReasonTimeout, "expired"},
		{session.ReasonShutdown, "connection_lost"},
		{session.ReasonSlowClient, "connection_lost"},
		{session.ReasonInternalError, "connection_lost"},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			tr := New(Options{})
			start(t, tr, map[string]any{"model": "gpt-live-1"})
			evs := tr.EncodeAll(session.SessionClosed{Reason: tc.reason})
			require.Len(t, evs, 1)
			c, ok := evs[0].(closedEvent)
			require.True(t, ok, "%T", evs[0])
			require.Equal(t, tc.live, c.Reason)
			require.Equal(t, int64(1800000000), c.Session.ExpiresAt)
		})
	}
}
