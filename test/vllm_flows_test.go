package test

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// vllm-omni's duplex dialect, event by event and flow by flow, as its own clients drive it
// (docs/REALTIME.md "vllm-omni duplex dialect"): on the real binary, with real speech, every
// numbered event acked as DuplexClient acks them (ackClient).

// goForwardSpoken is goforward.raw (16 kHz PCM16) up to the end of its speech: the 0.41 s of
// silence after it are left out, so that the engine's own VAD does not end the turn and the
// commit alone must.
func goForwardSpoken(t *testing.T) []byte {
	t.Helper()
	raw, err := os.ReadFile(goForwardRaw)
	require.NoError(t, err, "install pocketsphinx-testdata")
	return raw[:76002]
}

// duplexClientSession is the session.update DuplexClient sends with vllm-omni's MiniCPM-o
// preset (vllm_omni/clients/minicpmo_4_5.py): beta spelling, the engine owns the turns.
func duplexClientSession() map[string]any {
	return map[string]any{"model": "dummy:tiny", "modalities": []string{"audio", "text"},
		"input_audio_format": "pcm16", "output_audio_format": "pcm16", "turn_detection": nil,
		"max_response_output_tokens": 24, "ref_audio": "data:audio/wav;base64,UklGRgAAAABXQVZF",
		"overlap_policy": "listen_only", "playback_commit_policy": "ack_only",
		"extra_body": map[string]any{"auto_response": true, "minicpmo45_native_duplex": true, "force_listen_count": 0}}
}

// openVLLM connects as DuplexClient does (?duplex=1&model=...&autostart=0, then its
// session.update) and returns once the session is created and updated.
func openVLLM(t *testing.T, s *binServer, session map[string]any) (*ackClient, map[string]any) {
	t.Helper()
	c := dialAck(t, "ws://"+s.addr+"/v1/realtime?duplex=1&model=dummy:tiny&autostart=0")
	c.send(t, map[string]any{"type": "session.update", "event_id": "evt_open", "session": session})
	created := c.until(t, "session.created", 30*time.Second)
	c.until(t, "session.updated", 30*time.Second)
	return c, created
}

// appendPCM sends pcm (16 kHz PCM16) as DuplexClient's append_audio does: 100 ms appends with
// format, sample_rate_hz, duration_ms and audio_end_ms.
func appendPCM(t *testing.T, c *ackClient, pcm []byte, extra map[string]any) {
	t.Helper()
	end := 0
	for i := 0; i < len(pcm); i += 3200 {
		chunk := pcm[i:min(i+3200, len(pcm))]
		end += len(chunk) / 32
		ev := map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(chunk),
			"format": "pcm16", "sample_rate_hz": 16000, "duration_ms": len(chunk) / 32, "audio_end_ms": end}
		for k, v := range extra {
			ev[k] = v
		}
		c.send(t, ev)
	}
}

// seen is every event of type typ read so far.
func (c *ackClient) seen(typ string) []map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []map[string]any
	for _, m := range c.all {
		if m["type"] == typ {
			out = append(out, m)
		}
	}
	return out
}

// The session object says what omniserve serves in vllm-omni's terms and echoes vllm-omni's
// own keys; the input is 16 kHz unless the client names a rate.
func TestVLLMSessionObject(t *testing.T) {
	t.Parallel()
	s := startDuplexBinary(t)
	c, created := openVLLM(t, s, duplexClientSession())
	sess := c.seen("session.updated")[0]["session"].(map[string]any)
	caps := sess["capabilities"].(map[string]any)
	require.EqualValues(t, 1000, caps["chunk_period_ms"], "the listen cadence: one unit per second of audio")
	require.Equal(t, "model_native_duplex", caps["implementation_level"])
	require.Equal(t, true, caps["supports_session_resume"])
	require.Equal(t, "ack_only", sess["playback_commit_policy"])
	require.Equal(t, "listen_only", sess["overlap_policy"])
	require.Equal(t, "data:audio/wav;base64,UklGRgAAAABXQVZF", sess["ref_audio"])
	extra := sess["extra_body"].(map[string]any)
	require.Equal(t, true, extra["auto_response"])
	require.Equal(t, true, extra["minicpmo45_native_duplex"])
	require.EqualValues(t, 0, extra["force_listen_count"])
	require.Equal(t, "pcm16", sess["input_audio_format"], "beta spelling, as the client wrote it")
	require.NotEmpty(t, created["resume_token"])
	require.EqualValues(t, 1, created["attachment_generation"], "the session's first connection")
	require.EqualValues(t, 0, created["incarnation"], "one process: the fork's clients echo it on resume")
	require.Zero(t, c.typesSeen()["error"])
}

// Every vllm-omni key omniserve does not serve is refused by name, and the session stays as it
// was; the overlap thresholds are accepted at omniserve's values and echoed.
func TestVLLMSessionKeysRefusedByName(t *testing.T) {
	t.Parallel()
	s := startDuplexBinary(t)
	c, _ := openVLLM(t, s, duplexClientSession())
	tests := []struct {
		session map[string]any
		code    string
		param   string
	}{
		{map[string]any{"overlap_policy": "auto"}, "unsupported_value", "session.overlap_policy"},
		{map[string]any{"playback_commit_policy": "sometimes"}, "invalid_value", "session.playback_commit_policy"},
		{map[string]any{"extra_body": map[string]any{"force_listen_count": 3}}, "unsupported_value", "session.extra_body.force_listen_count"},
		{map[string]any{"extra_body": map[string]any{"duplex_initial_user_text": "hello"}}, "unsupported_value", "session.extra_body.duplex_initial_user_text"},
		{map[string]any{"extra_body": map[string]any{"return_stage_metrics": true}}, "unsupported_value", "session.extra_body.return_stage_metrics"},
		{map[string]any{"overlap_barge_in_ms": 900}, "unsupported_value", "session.overlap_barge_in_ms"},
		{map[string]any{"overlap_short_ack_ms": 300}, "unsupported_value", "session.overlap_short_ack_ms"},
		{map[string]any{"overlap_silence_rms": "quiet"}, "invalid_type", "session.overlap_silence_rms"},
	}
	for _, tc := range tests {
		c.send(t, map[string]any{"type": "session.update", "event_id": "evt_" + tc.param, "session": tc.session})
		e := c.until(t, "error", 10*time.Second)
		require.Equal(t, tc.code, errorCode(e), "%v", e)
		require.Equal(t, tc.param, e["error"].(map[string]any)["param"])
		require.Equal(t, "evt_"+tc.param, e["error"].(map[string]any)["event_id"])
	}
	// omniserve's own thresholds are what it serves: accepted, and every session object shows them.
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"instructions": "Be brief.",
		"overlap_barge_in_ms": 1200, "overlap_short_ack_ms": 700, "overlap_silence_rms": 0.003}})
	sess := c.until(t, "session.updated", 10*time.Second)["session"].(map[string]any)
	require.Equal(t, "ack_only", sess["playback_commit_policy"], "the refused updates changed nothing")
	require.InDelta(t, 1200, sess["overlap_barge_in_ms"], 0)
	require.InDelta(t, 700, sess["overlap_short_ack_ms"], 0)
	require.InDelta(t, 0.003, sess["overlap_silence_rms"], 1e-9)
}

// The barge-in example's first turn: the question streamed without trailing silence, then
// input_audio_buffer.commit with response_create false. In vllm-omni false means "the engine
// decides" (not "never"): the commit alone brings the answer. Its events are vllm-omni's:
// committed with its event object, response.speak before the audio, audio deltas with
// cumulative metadata, response.done completed. Then the client acks the whole response after
// response.done, naming item_<response_id>, as its examples do.
func TestVLLMCommitTheEngineDecides(t *testing.T) {
	t.Parallel()
	s := startDuplexBinary(t)
	c, _ := openVLLM(t, s, duplexClientSession())
	appendPCM(t, c, goForwardSpoken(t), nil)
	c.send(t, map[string]any{"type": "input_audio_buffer.commit", "final": true, "response_create": false})
	committed := c.until(t, "input_audio_buffer.committed", 30*time.Second)
	ev := committed["event"].(map[string]any)
	require.Equal(t, "input.committed", ev["type"])
	require.Equal(t, committed["item_id"], ev["realtime_item_id"])
	created := c.until(t, "response.created", time.Minute)
	rid := created["response"].(map[string]any)["id"].(string)
	speak := c.until(t, "response.speak", 30*time.Second)
	require.Equal(t, rid, speak["response_id"])
	require.Equal(t, "item_"+rid, speak["item_id"], "the assistant item is item_<response_id>")
	done := c.until(t, "response.done", time.Minute)
	require.Equal(t, "completed", done["response"].(map[string]any)["status"], "vllm-omni has no incomplete")

	var total, last float64
	for _, d := range c.seen("response.audio.delta") {
		require.Equal(t, rid, d["response_id"])
		md := d["metadata"].(map[string]any)
		total += d["audio_duration_ms"].(float64)
		require.InDelta(t, total, md["audio_duration_ms"], 1, "metadata's duration is the response's so far")
		require.GreaterOrEqual(t, md["audio_duration_ms"].(float64), last)
		last = md["audio_duration_ms"].(float64)
	}
	require.Positive(t, total, "the answer has audio")
	require.Empty(t, c.seen("response.output_audio.delta"), "audio in one spelling: a client maps both to one event")

	c.send(t, map[string]any{"type": "playback.ack", "played_ms": int(total), "committed_ms": int(total), "response_id": rid, "item_id": "item_" + rid})
	ack := c.until(t, "playback.acknowledged", 10*time.Second)
	aev := ack["event"].(map[string]any)
	require.Equal(t, "playback.acknowledged", aev["type"])
	require.Equal(t, "item_"+rid, aev["item_id"])
	require.Equal(t, true, aev["history_committed"], "all of it was committed: ack_only keeps the text")
	require.Zero(t, c.typesSeen()["error"], "no error: the clients raise on any")
}

// ack_only: an ack after response.done that commits less than was sent cuts the reply in the
// conversation; commit_all_on_done keeps it whole.
func TestVLLMPlaybackCommitPolicies(t *testing.T) {
	t.Parallel()
	s := startDuplexBinary(t)
	for _, policy := range []string{"ack_only", "commit_all_on_done"} {
		t.Run(policy, func(t *testing.T) {
			session := duplexClientSession()
			session["playback_commit_policy"] = policy
			c, _ := openVLLM(t, s, session)
			appendPCM(t, c, goForwardSpoken(t), nil)
			c.send(t, map[string]any{"type": "input.commit"})
			done := c.until(t, "response.done", time.Minute)
			rid := done["response"].(map[string]any)["id"].(string)
			c.send(t, map[string]any{"type": "audio.playback_ack", "played_ms": 300, "committed_ms": 200, "item_id": "item_" + rid})
			ev := c.until(t, "playback.acknowledged", 10*time.Second)["event"].(map[string]any)
			require.EqualValues(t, 200, ev["committed_ms"])
			require.Equal(t, policy == "ack_only", ev["truncate"])
			require.Equal(t, policy != "ack_only", ev["history_committed"])
			if policy == "ack_only" {
				tr := c.until(t, "conversation.item.truncated", 10*time.Second)
				require.Equal(t, "item_"+rid, tr["item_id"])
				require.EqualValues(t, 200, tr["audio_end_ms"])
			}
			c.send(t, map[string]any{"type": "playback.ack", "played_ms": 10, "response_id": "resp_nope"})
			e := c.until(t, "error", 10*time.Second)
			require.Equal(t, "playback_item_not_found", errorCode(e))
		})
	}
}

// A commit of audio the engine has already taken (its VAD ended the utterance and it answers)
// is accepted, not refused as empty: committed with event.empty, and the running response is
// the turn's outcome. The MiniCPM-o demo commits so after its whole input.
func TestVLLMCommitAfterTheEngineTookTheAudio(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(goForwardRaw)
	require.NoError(t, err)
	s := startDuplexBinary(t)
	c, _ := openVLLM(t, s, duplexClientSession())
	appendPCM(t, c, append(raw, make([]byte, 48000)...), nil) // + 1.5 s of silence: the engine's VAD ends the turn
	c.until(t, "response.created", time.Minute)
	c.send(t, map[string]any{"type": "input_audio_buffer.commit", "event_id": "evt_late"})
	var empty map[string]any
	require.Eventually(t, func() bool {
		for _, m := range c.seen("input_audio_buffer.committed") {
			if ev, _ := m["event"].(map[string]any); ev["empty"] == true {
				empty = ev
				return true
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "the late commit is accepted")
	require.NotEqual(t, true, empty["no_response"], "a response carries the turn")
	c.until(t, "response.done", time.Minute)
	require.Zero(t, c.typesSeen()["error"], "no input_audio_buffer_empty")
	require.Empty(t, reasonedListens(c), "no listen: the response was the outcome")
}

// reasonedListens are the listens that ended a turn (a reason other than the engine's listen).
func reasonedListens(c *ackClient) []map[string]any {
	var out []map[string]any
	for _, l := range c.seen("response.listen") {
		md := l["response"].(map[string]any)["metadata"].(map[string]any)
		if md["reason"] != "model_listen" {
			out = append(out, l)
		}
	}
	return out
}

// is_speech: false marks the input as silence: the commit adds an empty user item and ends the
// turn with response.listen{reason: silence_or_noise}, no response. A commit with nothing
// appended since the last one is still input_audio_buffer_empty.
func TestVLLMSilenceCommit(t *testing.T) {
	t.Parallel()
	s := startDuplexBinary(t)
	c, _ := openVLLM(t, s, duplexClientSession())
	appendPCM(t, c, make([]byte, 16000), map[string]any{"is_speech": false})
	c.send(t, map[string]any{"type": "input_audio_buffer.commit", "is_speech": false})
	ev := c.until(t, "input_audio_buffer.committed", 10*time.Second)["event"].(map[string]any)
	require.Equal(t, true, ev["empty"])
	require.Equal(t, true, ev["no_response"])
	require.Eventually(t, func() bool { return len(reasonedListens(c)) == 1 }, 10*time.Second, 20*time.Millisecond)
	md := reasonedListens(c)[0]["response"].(map[string]any)["metadata"].(map[string]any)
	require.Equal(t, "silence_or_noise", md["reason"])
	require.Equal(t, false, md["model_listen"])
	c.send(t, map[string]any{"type": "input_audio_buffer.commit", "event_id": "evt_again"})
	e := c.until(t, "error", 10*time.Second)
	require.Equal(t, "input_audio_buffer_empty", errorCode(e))
	require.Empty(t, c.seen("response.created"))
}

// While the engine listens, response.listen comes once per unit of streamed audio
// (capabilities.chunk_period_ms, 1 s), with metadata.reason model_listen, not once per append:
// vllm-omni's responses() turns each into a handle.
func TestVLLMListenOncePerUnit(t *testing.T) {
	t.Parallel()
	s := startDuplexBinary(t)
	c, _ := openVLLM(t, s, duplexClientSession())
	appendPCM(t, c, make([]byte, 5*32000), nil) // 5 s of silence in 50 appends
	time.Sleep(2 * time.Second)                 // the engine's decisions on them
	listens := c.seen("response.listen")
	require.GreaterOrEqual(t, len(listens), 3, "the engine listened")
	require.LessOrEqual(t, len(listens), 5, "at most one per second of audio")
	for _, l := range listens {
		md := l["response"].(map[string]any)["metadata"].(map[string]any)
		require.Equal(t, "model_listen", md["reason"])
		require.Nil(t, l["response_id"])
	}
}

// Plain /v1/realtime keeps OpenAI's meaning where the two conflict: response_create false
// never answers, and an empty commit is OpenAI's input_audio_buffer_commit_empty.
func TestVLLMPlainRealtimeKeepsOpenAI(t *testing.T) {
	t.Parallel()
	s := startDuplexBinary(t)
	c := dialAck(t, "ws://"+s.addr+"/v1/realtime")
	c.until(t, "session.created", 30*time.Second)
	c.send(t, map[string]any{"type": "session.update", "session": map[string]any{"type": "realtime", "output_modalities": []string{"text"},
		"audio": map[string]any{"input": map[string]any{"format": map[string]any{"type": "audio/pcm", "rate": 16000}, "turn_detection": nil}}}})
	c.until(t, "session.updated", 30*time.Second)
	pcm := goForwardSpoken(t)
	for i := 0; i < len(pcm); i += 3200 {
		c.send(t, map[string]any{"type": "input_audio_buffer.append", "audio": base64.StdEncoding.EncodeToString(pcm[i:min(i+3200, len(pcm))])})
	}
	c.send(t, map[string]any{"type": "input_audio_buffer.commit", "response_create": false})
	committed := c.until(t, "input_audio_buffer.committed", 30*time.Second)
	_, nested := committed["event"]
	require.False(t, nested, "OpenAI's committed is flat")
	time.Sleep(3 * time.Second)
	require.Empty(t, c.seen("response.created"), "OpenAI: a manual commit is never answered by itself")
	c.send(t, map[string]any{"type": "input_audio_buffer.commit"})
	e := c.until(t, "error", 10*time.Second)
	require.Equal(t, "input_audio_buffer_commit_empty", errorCode(e))
}

// turn.signal with an event that asks for no action (user_started, assistant_done...) is
// answered with turn.event {session_id, event, turn_state, epoch}, numbered; an acting one
// (barge_in) acts.
func TestVLLMTurnSignal(t *testing.T) {
	t.Parallel()
	s := startDuplexBinary(t)
	c, created := openVLLM(t, s, duplexClientSession())
	c.send(t, map[string]any{"type": "turn.signal", "event": "user_started", "payload": map[string]any{}})
	ev := c.until(t, "turn.event", 10*time.Second)
	require.Equal(t, "user_started", ev["event"])
	require.Equal(t, "idle", ev["turn_state"])
	require.Equal(t, created["session"].(map[string]any)["id"], ev["session_id"])
	require.NotNil(t, ev["server_event_seq"])
	c.send(t, map[string]any{"type": "signal_turn", "event": "assistant_done"})
	require.Equal(t, "assistant_done", c.until(t, "turn.event", 10*time.Second)["event"])
	require.Zero(t, c.typesSeen()["error"])
}

// The barge-in example's flow (barge_in_client.py with the MiniCPM-o preset: listen_only, the
// engine owns the turns): while the answer plays the user talks over it for 3 s. A substantial
// interruption cuts the answer (overlap.decision barge_in, the first response done cancelled
// with reason barge_in). The example then does what it does: its wait for "a response.done
// after the interruption" met by that cut, it commits the interruption, acks the playback and
// closes at once. The close is held behind the commit's outcome (vllm-omni closes after the
// events admitted before the close), so the example sees two responses: the commit's
// committed, the second response (the answer to the interruption), which the close then
// cancels, and session.closed.
func TestVLLMSubstantialInterruptionCutsTheAnswer(t *testing.T) {
	t.Parallel()
	c, first := answering(t)

	numbers, err := os.ReadFile("/usr/share/pocketsphinx/test/data/numbers.raw")
	require.NoError(t, err, "install pocketsphinx-testdata")
	appendPCM(t, c, numbers[:3*32000], nil)
	dec := c.until(t, "overlap.decision", 30*time.Second)
	require.Equal(t, "barge_in", dec["action"])
	require.Equal(t, "sustained_speech", dec["reason"])
	require.Equal(t, "listen_only", dec["policy"])
	done := c.until(t, "response.done", 30*time.Second)["response"].(map[string]any)
	require.Equal(t, first, done["id"])
	require.Equal(t, "cancelled", done["status"])
	require.Equal(t, "barge_in", done["status_details"].(map[string]any)["reason"])

	// As the example: commit, ack what was sent, close, all at once.
	c.send(t, map[string]any{"type": "input_audio_buffer.commit", "final": true, "response_create": false})
	c.send(t, map[string]any{"type": "playback.ack", "played_ms": 1000, "response_id": first, "item_id": "item_" + first})
	c.send(t, map[string]any{"type": "session.close"})
	c.until(t, "input_audio_buffer.committed", 30*time.Second)
	second := c.until(t, "response.created", 30*time.Second)["response"].(map[string]any)["id"].(string)
	require.NotEqual(t, first, second)
	done = c.until(t, "response.done", 30*time.Second)["response"].(map[string]any)
	require.Equal(t, second, done["id"])
	require.Equal(t, "cancelled", done["status"], "the close cancels the answer that runs")
	require.Equal(t, "client_close", done["status_details"].(map[string]any)["reason"])
	require.Equal(t, "client_close", c.until(t, "session.closed", 10*time.Second)["reason"])
	require.Zero(t, c.typesSeen()["error"], "no error: the clients raise on any")
}

// A session.close right after a commit the engine decides is held until the commit's outcome
// has gone out (here the answer, which the close then cancels); what the client sends after
// the close is refused (a heartbeat, which changes no conversation, is still answered); a
// close with nothing owed is at once.
func TestVLLMCloseAfterCommitAwaitsItsOutcome(t *testing.T) {
	t.Parallel()
	s := startDuplexBinary(t)
	c, _ := openVLLM(t, s, duplexClientSession())
	appendPCM(t, c, goForwardSpoken(t), nil)
	c.send(t, map[string]any{"type": "input_audio_buffer.commit", "final": true, "response_create": false})
	c.send(t, map[string]any{"type": "session.close"})
	c.send(t, map[string]any{"type": "conversation.item.create", "event_id": "evt_late", "item": map[string]any{"type": "message",
		"role": "user", "content": []any{map[string]any{"type": "input_text", "text": "too late"}}}})
	c.send(t, map[string]any{"type": "session.heartbeat"}) // changes no conversation: still answered
	var order []string
	var late, done map[string]any
	rid := ""
	for ev := range c.events { // the channel ends with the connection, after session.closed
		typ := ev["type"].(string)
		switch typ {
		case "error":
			late = ev
		case "response.created":
			rid = ev["response"].(map[string]any)["id"].(string)
		case "response.done":
			done = ev["response"].(map[string]any)
		}
		if typ == "error" || typ == "input_audio_buffer.committed" || typ == "response.created" || typ == "response.done" || typ == "session.closed" {
			order = append(order, typ)
		}
	}
	require.NotNil(t, late, "the event after the close is answered")
	require.Equal(t, 1, c.typesSeen()["session.heartbeat_ack"])
	require.Equal(t, "session_closing", errorCode(late))
	require.Equal(t, "evt_late", late["error"].(map[string]any)["event_id"])
	require.NotEqual(t, "error", order[len(order)-1])
	require.Equal(t, []string{"input_audio_buffer.committed", "response.created", "response.done", "session.closed"},
		slices.DeleteFunc(order, func(s string) bool { return s == "error" }))
	require.Equal(t, rid, done["id"])
	require.Equal(t, "cancelled", done["status"])
	require.Equal(t, "client_close", done["status_details"].(map[string]any)["reason"])

	// Nothing owed: the close is at once.
	c2, _ := openVLLM(t, s, duplexClientSession())
	start := time.Now()
	c2.send(t, map[string]any{"type": "session.close"})
	require.Equal(t, "client_close", c2.until(t, "session.closed", 10*time.Second)["reason"])
	require.Less(t, time.Since(start), 2*time.Second)
}

// responseText is the text of a realtime.response's output: its messages' text or transcript.
func responseText(resp map[string]any) string {
	var b strings.Builder
	out, _ := resp["output"].([]any)
	for _, it := range out {
		content, _ := it.(map[string]any)["content"].([]any)
		for _, p := range content {
			part := p.(map[string]any)
			for _, k := range []string{"text", "transcript"} {
				if s, ok := part[k].(string); ok {
					b.WriteString(s)
				}
			}
		}
	}
	return b.String()
}

// response.create's temperature samples that response alone: on a session sampled greedily
// (the server's default, temperature 0) the same out-of-band question gets the same answer
// every time, except from the response asked at 1.8; the next one is greedy again. A
// temperature out of [0, 2] is refused, naming it; speed other than 1 is refused by name.
func TestVLLMResponseTemperature(t *testing.T) {
	t.Parallel()
	s := startDuplexBinary(t)
	c, _ := openVLLM(t, s, map[string]any{"model": "dummy:tiny", "modalities": []string{"text"}, "turn_detection": nil,
		"max_response_output_tokens": 24})
	ask := func(extra map[string]any) string {
		t.Helper()
		resp := map[string]any{"conversation": "none", "input": []any{map[string]any{"type": "message", "role": "user",
			"content": []any{map[string]any{"type": "input_text", "text": "what should we do about the weather"}}}}}
		for k, v := range extra {
			resp[k] = v
		}
		c.send(t, map[string]any{"type": "response.create", "response": resp})
		done := c.until(t, "response.done", time.Minute)["response"].(map[string]any)
		require.Equal(t, "completed", done["status"])
		text := responseText(done)
		require.NotEmpty(t, text)
		return text
	}
	greedy := ask(nil)
	hot := ask(map[string]any{"temperature": 1.8})
	require.NotEqual(t, greedy, hot, "the response's temperature reached its sampling")
	require.Equal(t, greedy, ask(nil), "the next response samples at the session's temperature again")
	require.Equal(t, greedy, ask(map[string]any{"temperature": 0, "speed": 1}))

	for _, tc := range []struct {
		response map[string]any
		code     string
		param    string
	}{
		{map[string]any{"temperature": 2.1}, "invalid_value", "response.temperature"},
		{map[string]any{"temperature": "warm"}, "invalid_value", "response.temperature"},
		{map[string]any{"speed": 1.25}, "unsupported_response_option", "response.speed"},
	} {
		c.send(t, map[string]any{"type": "response.create", "event_id": "evt_bad", "response": tc.response})
		ev := c.until(t, "error", 10*time.Second)
		require.Equal(t, tc.code, errorCode(ev), tc.response)
		require.Equal(t, tc.param, ev["error"].(map[string]any)["param"], tc.response)
		require.Equal(t, "evt_bad", ev["error"].(map[string]any)["event_id"])
	}
}

// Function calls on vllm-omni's dialect are its tool events (the spec's Nemotron lane): the
// call is a function_call item (both item spellings), its arguments stream in
// response.function_call_arguments.delta and end in .done, each with the call's call_id and
// the done with its name; the client's function_call_output continues the conversation. A
// call is always well formed here (call markup that does not parse stays the reply's text), so
// duplex.function_call.done, vllm-omni's event for a call without call_id or name, never comes.
func TestVLLMFunctionCall(t *testing.T) {
	t.Parallel()
	s := startDuplexBinary(t)
	tool := map[string]any{"type": "function", "name": "lookup_order", "description": "Look up an order",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"order_id": map[string]any{"type": "string"}},
			"required": []any{"order_id"}}}
	c, _ := openVLLM(t, s, map[string]any{"model": "dummy:tiny", "modalities": []string{"text"}, "turn_detection": nil,
		"tools": []any{tool}, "tool_choice": "required"})
	c.send(t, map[string]any{"type": "input.text.append", "text": "Where is order 42?"})
	c.send(t, map[string]any{"type": "input.commit"})
	done := c.until(t, "response.done", time.Minute)["response"].(map[string]any)
	require.Equal(t, "completed", done["status"])
	args := c.seen("response.function_call_arguments.done")
	require.Len(t, args, 1)
	callID, _ := args[0]["call_id"].(string)
	require.NotEmpty(t, callID)
	require.Equal(t, "lookup_order", args[0]["name"])
	var parsed map[string]any
	require.NoError(t, json.Unmarshal([]byte(args[0]["arguments"].(string)), &parsed))
	require.IsType(t, "", parsed["order_id"])
	for _, d := range c.seen("response.function_call_arguments.delta") {
		require.Equal(t, callID, d["call_id"])
	}
	var added, created int
	for _, typ := range []string{"conversation.item.added", "conversation.item.created"} {
		for _, ev := range c.seen(typ) {
			if it := ev["item"].(map[string]any); it["type"] == "function_call" {
				require.Equal(t, callID, it["call_id"])
				if typ == "conversation.item.added" {
					added++
				} else {
					created++
				}
			}
		}
	}
	require.Equal(t, []int{1, 1}, []int{added, created}, "the call's item in both spellings")
	require.Empty(t, c.seen("duplex.function_call.done"))

	c.send(t, map[string]any{"type": "conversation.item.create", "item": map[string]any{
		"type": "function_call_output", "call_id": callID, "output": `{"status":"shipped"}`}})
	c.send(t, map[string]any{"type": "response.create", "response": map[string]any{"tool_choice": "none", "max_output_tokens": 12}})
	next := c.until(t, "response.done", time.Minute)["response"].(map[string]any)
	require.NotEqual(t, done["id"], next["id"])
	require.NotEmpty(t, responseText(next), "the conversation continues from the result")
	require.Zero(t, c.typesSeen()["error"])
}
