package session

import (
	"time"

	"github.com/omniserve/omniserve/internal/protocol"
)

// The session object of session.created, session.updated and session.resumed (and of
// transcription_session.*), still built here in the OpenAI shape: the session's configuration
// is made wire-neutral apart (its encoder moves to internal/realtime/openai/session.go). Until
// then WireSessionEvent carries these events through the translator as they are.

// WireSessionEvent is session.created or session.updated as the protocol types it (temporary:
// see above).
type WireSessionEvent struct{ Payload protocol.ServerEvent }

func (WireSessionEvent) effect() {}

// mcpTool is one `type: "mcp"` tool of session.tools: the protocol's definition (Index is its
// position in session.tools, for error params).
type mcpTool = protocol.MCPTool

// wireFormat is the GA audio format object.
func wireFormat(f AudioFormat) protocol.FormatSpec {
	switch f.Type {
	case "g711_ulaw":
		return protocol.FormatSpec{Type: "audio/pcmu"}
	case "g711_alaw":
		return protocol.FormatSpec{Type: "audio/pcma"}
	case "pcm_f32le":
		return protocol.FormatSpec{Type: "audio/pcm_f32le", Rate: f.Rate}
	}
	return protocol.FormatSpec{Type: "audio/pcm", Rate: f.Rate}
}

// maxTokensWire is max_output_tokens on the wire: 0 is "inf"; with a server default
// (serverDefault), that is what the engine applies to "inf", so the session tells the limit in
// force.
func maxTokensWire(n, serverDefault int) protocol.MaxTokens {
	if n > 0 {
		return protocol.MaxTokens(n)
	}
	return protocol.MaxTokens(serverDefault)
}

// publicSession is the full effective session (protocol.Encode spells it beta for beta
// clients), plus the omniserve extensions (duplex, state, capabilities) that strict clients
// ignore.
func (s *Session) publicSession() protocol.SessionObject {
	if s.settings.opts.Transcription {
		return s.settings.transcriptionSession(s.id, s.expiresAt, s.state, s.Resumable())
	}
	speed := 1.0
	return &protocol.Session{
		ID: s.id, Object: "realtime.session", Type: "realtime", Model: s.settings.cfg.Model,
		Instructions: s.settings.cfg.Instructions, Tools: append(toolsWire(s.settings.cfg.Tools), mcpToolsWire(s.settings.cfg.MCP)...), ToolChoice: toolChoiceWire(s.settings.cfg.ToolChoice),
		ExpiresAt: s.expiresAt.Unix(), OutputModalities: outputModalities(s.settings.cfg.WantAudio()),
		MaxOutputTokens: maxTokensWire(s.settings.cfg.MaxOutputTokens, s.m.cfg.DefaultMaxOutputTokens), Tracing: s.settings.cfg.Tracing, Truncation: "auto",
		Temperature: s.settings.temperature(), Include: s.settings.includeWire(),
		Audio: protocol.SessionAudio{
			Input:  s.settings.audioInput(false),
			Output: &protocol.AudioOutput{Format: wireFormat(s.settings.cfg.OutputFormat), Voice: s.settings.cfg.Voice, Speed: &speed},
		},
		// omniserve extensions
		IdleTimeoutS: s.settings.cfg.IdleTimeout.Seconds(), OverlapPolicy: s.settings.cfg.OverlapPolicy(),
		Duplex: s.settings.opts.Duplex, AutoResponse: s.settings.autoResponse(), State: s.state, TurnState: s.turnState,
		Epoch: s.epoch, Turn: s.turnID,
		ExtraBody: protocol.ExtraBody{AutoResponse: s.settings.autoResponse(), Seed: s.settings.cfg.Seed},
		Capabilities: protocol.Capabilities{SupportsBargeIn: true, SupportsSessionResume: s.Resumable(),
			SupportsAudioTruncate: true, ChunkPeriodMs: frameMs, TargetBargeInLatencyMs: 100, BargeInMinSpeechMs: overlapMinSpeechMs,
			BargeInPitchedSpeechMs: overlapEarlySpeechMs,
			MaxOutputLeadMs:        s.m.cfg.MaxOutputLead.Milliseconds(), FullDuplex: s.settings.opts.Duplex},
	}
}

// transcriptionSession is the effective realtime.transcription_session (protocol.Encode spells
// it beta for beta clients), plus the omniserve extensions a client may need (resume, idle
// timeout).
func (c *settings) transcriptionSession(id string, expiresAt time.Time, state string, resumable bool) *protocol.TranscriptionSession {
	return &protocol.TranscriptionSession{
		ID: id, Object: "realtime.transcription_session", Type: "transcription", ExpiresAt: expiresAt.Unix(),
		Audio: protocol.SessionAudio{Input: c.audioInput(true)}, Include: c.includeWire(),
		// omniserve extensions
		IdleTimeoutS: c.cfg.IdleTimeout.Seconds(), State: state,
		Capabilities: protocol.TranscriptionCapabilities{SupportsSessionResume: resumable},
	}
}

// Preview is the session object (as session.created shows it) a new session with opts would
// have after patch, or the refusal (a *FieldError for a bad field): how POST
// /v1/realtime/client_secrets validates and echoes the session it mints a key for. It takes no
// slot and starts nothing.
func (m *Manager) Preview(opts Options, patch ConfigPatch) (protocol.SessionObject, error) {
	opts.Initial = nil
	s := m.NewSession(nil, opts, nil)
	cfg, err := s.nextConfig(patch)
	if err != nil {
		return nil, err
	}
	s.settings.cfg = cfg
	return s.publicSession(), nil
}

// sessionCreated is session.created (transcription_session.created for a beta transcription
// session), with the resume token of a resumable session.
func (s *Session) sessionCreated() Effect {
	return WireSessionEvent{protocol.SessionCreated{Session: s.publicSession(),
		ResumeToken: s.attachment.resumeToken, Transcription: s.settings.legacyTranscription(false)}}
}

// sessionUpdated is session.updated (transcription_session.updated for a beta transcription
// session, or for an update the client sent as transcription_session.update: legacy).
func (s *Session) sessionUpdated(legacy bool) Effect {
	return WireSessionEvent{protocol.SessionUpdated{Session: s.publicSession(), Transcription: s.settings.legacyTranscription(legacy)}}
}
