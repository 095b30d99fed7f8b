package live

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// A WebRTC Live session (POST /v1/live/sessions) is the same translator over another transport:
// its start is the POST's session (StartMedia), its events flow on the call's "oai-events" data
// channel and its sidebands, and its audio is the call's RTP. The microphone's decoded audio
// advances the timeline as a WebSocket client's appends do (TakeMedia); the reply's audio
// frames are handed to the call's player as Realtime's audio deltas (mediaAudio), which it
// encodes and paces on the outbound track. A sideband also gets both directions' audio
// reflected (reflectedInput, reflectedOutput), as OpenAI's does.

// MediaRate is the rate of a WebRTC session's audio on the timeline: the call decodes its
// microphone to PCM16 at 24 kHz, and its player takes the talker's 24 kHz.
const MediaRate = 24000

// SessionID is the Live id of the session whose id is sessionID (the Live prefix, live_).
func SessionID(sessionID string) string { return "live_" + strings.TrimPrefix(sessionID, "duplex-") }

// StartMedia starts a WebRTC session with the POST's session config (raw): checked strictly as
// MediaSessionConfig (no audio.format: the codec is negotiated; param paths as in
// session.start), it gives the commands that start the session, which the transport submits
// before any other. Its answer, session.started, goes out on the data channel.
func (t *Translator) StartMedia(raw json.RawMessage) ([]session.Command, *protocol.Error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, werr := parseStart(raw, t.opts.TestHooks, true)
	if werr != nil {
		return nil, werr
	}
	t.media = true
	reply, werr := t.begin(r, session.Base{Kind: "session.start"})
	if werr != nil {
		return nil, werr
	}
	return reply.Commands, nil
}

// Model is the model the session was started with, as the client named it ("" before a start).
func (t *Translator) Model() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cfg == nil {
		return ""
	}
	return t.cfg.res.Model
}

// TakeMedia is the microphone's audio of a WebRTC session (PCM16 at MediaRate) taken on the
// timeline, as a WebSocket client's session.input_audio.append is: muted, the session hears
// silence of the same length; the acks and usage that came due go out with it. nil while the
// session has not started (its start was refused): the audio is dropped.
func (t *Translator) TakeMedia(pcm []byte) *Reply {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cfg == nil || t.phase == notStarted {
		return nil
	}
	reply := t.takeAudio(session.Base{Kind: "session.input_audio.append"}, pcm, len(pcm)/2)
	reply.Events = append([]protocol.ServerEvent{reflectedInput{Audio: pcm}}, reply.Events...) // before muting
	return reply
}

// SidebandOnly reports the event types of a WebRTC session that go to its sidebands only, not
// to its data channel: the reflected audio (the microphone's, before muting, and the reply's
// with its place on the track), PCM16 at 24 kHz.
func SidebandOnly(typ string) bool {
	return typ == reflectedInput{}.EventType() || typ == reflectedOutput{}.EventType()
}

// mediaRefuses refuses on a WebRTC session what only a WebSocket client sends: session.start
// (the POST started it) and session.input_audio.append (the audio is RTP), on the data channel
// and the sidebands alike.
func (t *Translator) mediaRefuses(ev clientEvent) *protocol.Error {
	if !t.media {
		return nil
	}
	switch ev.typ {
	case "session.start":
		return &protocol.Error{Code: "session_already_started", EventID: ev.id,
			Message: "A WebRTC session is started by its POST /v1/live/sessions; never send session.start on it."}
	case "session.input_audio.append":
		return &protocol.Error{Code: "invalid_value", Param: "type", EventID: ev.id,
			Message: "session.input_audio.append is not used on a WebRTC session: its audio is the call's RTP track."}
	}
	return nil
}

// mediaAudio is a reply's audio frame as the call's player takes it: Realtime's audio delta
// (PCM16 at the talker's 24 kHz, the response and item it belongs to), never sent as such on
// the data channel (the call plays it on the track).
func mediaAudio(e session.OutputDelta) protocol.ServerEvent {
	format, rate := e.Format.Type, e.Format.Rate
	if format == "" {
		format, rate = "pcm16", MediaRate
	}
	return protocol.ResponseOutputAudioDelta{Delta: base64.StdEncoding.EncodeToString(e.Audio), Format: format,
		SampleRateHz: rate, ResponseID: e.ResponseID, ItemID: e.ItemID, AudioDurationMs: e.DurationMs}
}

// SidebandReplayMs is how much of the session's timeline a sideband joining a WebRTC session
// gets replayed first (OpenAI's sideband replays its last 3 s).
const SidebandReplayMs = 3000

// TimelineMs is where t's session timeline stands (ms of input audio taken): the clock of the
// sideband's replay. A function, not a method: the Translator's methods are the dialect's.
func TimelineMs(t *Translator) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tl.ms()
}
