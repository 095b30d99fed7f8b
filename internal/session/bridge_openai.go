package session

// bridge until the effects translator lands (issue 37): this whole file goes at the merge.
//
// Until then the session's Event carries a protocol payload. The session effects of the
// configuration (settings_effects.go) are turned into that payload by the encoder the OpenAI
// translator registers (internal/realtime/openai.EncodeSession; internal/realtime registers it
// at init, the session's tests in bridge_openai_test.go), so session.created and
// session.updated are written by the translator already. The settings' wire helpers below are
// parked here for publicSession (handlers.go), which session.resumed still uses.

import "github.com/omniserve/omniserve/internal/protocol"

// sessionEncoder is the registered encoder of the session effects.
var sessionEncoder func(Effect) (protocol.ServerEvent, bool)

// SetSessionEncoder registers the dialect translator's encoder of the session effects.
// bridge until the effects translator lands (issue 37).
func SetSessionEncoder(encode func(Effect) (protocol.ServerEvent, bool)) { sessionEncoder = encode }

// sendEffect sends a session effect as today's Event (bridge until the effects translator
// lands, issue 37).
func (s *Session) sendEffect(e Effect) {
	if sessionEncoder == nil {
		panic("session: no session effect encoder registered (internal/realtime registers it)")
	}
	p, ok := sessionEncoder(e)
	if !ok {
		panic("session: the registered encoder does not encode this effect")
	}
	s.send(Event{Epoch: s.epoch, Payload: p})
}

// audioInput is the session's audio.input; a transcription session's turn_detection has no
// response flags (noResponse). Parked for publicSession (session.resumed).
func (c *settings) audioInput(noResponse bool) protocol.AudioInput {
	in := protocol.AudioInput{Format: wireFormat(c.cfg.InputFormat), SampleRateHz: c.cfg.InputFormat.Rate}
	if c.cfg.Transcription {
		in.Transcription = &protocol.Transcription{Model: "pocketsphinx", Language: "en", Prompt: ""}
	}
	if c.cfg.NoiseReduction != "" {
		in.NoiseReduction = &protocol.NoiseReduction{Type: c.cfg.NoiseReduction}
	}
	if td := c.cfg.TurnDetection; td != nil {
		in.TurnDetection = &protocol.TurnDetectionObject{Type: td.Type, Threshold: td.Threshold, PrefixPaddingMs: td.PrefixPaddingMs,
			SilenceDurationMs: td.SilenceDurationMs, IdleTimeoutMs: td.IdleTimeoutMs, CreateResponse: td.CreateResponse,
			InterruptResponse: td.InterruptResponse, Eagerness: td.Eagerness, NoResponse: noResponse}
	}
	return in
}

// includeWire is the session object's include: the logprobs value while it is set, else null.
// Parked for publicSession (session.resumed).
func (c *settings) includeWire() *[]string {
	if !c.cfg.TranscriptLogprobs {
		return nil
	}
	return &[]string{protocol.IncludeLogprobs}
}
