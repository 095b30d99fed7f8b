// Package openai is the OpenAI Realtime dialect's translator: it turns the session's effects
// into the protocol's server events (GA-shaped; protocol.Encode spells them beta for a beta
// client). This file writes the session objects.
package openai

import (
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/session"
)

// EncodeSession returns the event of a session effect: session.created / session.updated,
// named transcription_session.* where the effect asks for the legacy names. false: e is not a
// session effect.
func EncodeSession(e session.Effect) (protocol.ServerEvent, bool) {
	switch e := e.(type) {
	case session.SessionCreated:
		return protocol.SessionCreated{Session: SessionObject(e.View), ResumeToken: e.ResumeToken, Transcription: e.LegacyNames}, true
	case session.SessionUpdated:
		return protocol.SessionUpdated{Session: SessionObject(e.View), Transcription: e.LegacyNames}, true
	}
	return nil, false
}

// SessionObject is the session object of a view: a realtime.transcription_session for a
// transcription session, else a realtime.session, each with the omniserve extensions that
// strict clients ignore. (session.resumed and a client secret's preview carry it too.)
func SessionObject(v session.SessionView) protocol.SessionObject {
	if v.Transcription {
		return transcriptionSession(v)
	}
	return realtimeSession(v)
}

func realtimeSession(v session.SessionView) *protocol.Session {
	speed := v.Output.Speed
	c := v.Capabilities
	return &protocol.Session{
		ID: v.ID, Object: "realtime.session", Type: "realtime", Model: v.Model, Instructions: v.Instructions,
		Tools: append(sessionFunctionTools(v.Tools.Functions), sessionMCPTools(v.Tools.MCP)...), ToolChoice: sessionToolChoice(v.Tools.Choice),
		ExpiresAt: v.ExpiresAt.Unix(), OutputModalities: sessionModalities(v.Output.Audio),
		MaxOutputTokens: protocol.MaxTokens(v.MaxOutputTokens), Tracing: v.Tracing,
		Truncation:  protocol.Truncation{Type: v.Truncation.Mode, RetentionRatio: v.Truncation.RetentionRatio, PostInstructions: v.Truncation.PostInstructions},
		Temperature: v.Temperature, Include: sessionInclude(v.Input.TranscriptLogprobs),
		Audio: protocol.SessionAudio{
			Input:  sessionAudioInput(v.Input, false),
			Output: &protocol.AudioOutput{Format: sessionFormat(v.Output.Format), Voice: v.Output.Voice, Speed: &speed},
		},
		// omniserve extensions
		IdleTimeoutS: v.IdleTimeout.Seconds(), OverlapPolicy: v.OverlapPolicy,
		Duplex: v.Duplex, AutoResponse: v.AutoResponse, State: v.State, TurnState: v.TurnState, Epoch: v.Epoch, Turn: v.Turn,
		ExtraBody: protocol.ExtraBody{AutoResponse: v.AutoResponse, Seed: v.Seed},
		Capabilities: protocol.Capabilities{SupportsBargeIn: c.BargeIn, SupportsSessionResume: c.Resume,
			SupportsAudioTruncate: c.AudioTruncate, ChunkPeriodMs: c.ChunkPeriodMs, TargetBargeInLatencyMs: c.TargetBargeInLatencyMs,
			BargeInMinSpeechMs: c.BargeInMinSpeechMs, BargeInPitchedSpeechMs: c.BargeInPitchedSpeechMs,
			MaxOutputLeadMs: c.MaxOutputLead.Milliseconds(), FullDuplex: c.FullDuplex},
	}
}

// transcriptionSession is a transcription session's object: its turn_detection has no response
// flags, as it never responds.
func transcriptionSession(v session.SessionView) *protocol.TranscriptionSession {
	return &protocol.TranscriptionSession{
		ID: v.ID, Object: "realtime.transcription_session", Type: "transcription", ExpiresAt: v.ExpiresAt.Unix(),
		Audio: protocol.SessionAudio{Input: sessionAudioInput(v.Input, true)}, Include: sessionInclude(v.Input.TranscriptLogprobs),
		// omniserve extensions
		IdleTimeoutS: v.IdleTimeout.Seconds(), State: v.State,
		Capabilities: protocol.TranscriptionCapabilities{SupportsSessionResume: v.Capabilities.Resume},
	}
}

// sessionAudioInput is audio.input; noResponse leaves turn_detection's response flags out.
// sample_rate_hz (an extension) is the input format's rate, which the beta format string
// cannot carry.
func sessionAudioInput(in session.InputView, noResponse bool) protocol.AudioInput {
	w := protocol.AudioInput{Format: sessionFormat(in.Format), SampleRateHz: in.Format.Rate}
	if t := in.Transcription; t != nil {
		w.Transcription = &protocol.Transcription{Model: t.Model, Language: t.Language, Prompt: t.Prompt}
	}
	if in.NoiseReduction != "" {
		w.NoiseReduction = &protocol.NoiseReduction{Type: in.NoiseReduction}
	}
	if td := in.TurnDetection; td != nil {
		w.TurnDetection = &protocol.TurnDetectionObject{Type: td.Type, Threshold: td.Threshold, PrefixPaddingMs: td.PrefixPaddingMs,
			SilenceDurationMs: td.SilenceDurationMs, IdleTimeoutMs: td.IdleTimeoutMs, CreateResponse: td.CreateResponse,
			InterruptResponse: td.InterruptResponse, Eagerness: td.Eagerness, NoResponse: noResponse}
	}
	return w
}

// sessionFormat is the GA audio format object.
func sessionFormat(f session.AudioFormat) protocol.FormatSpec {
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

// sessionModalities is the GA single-modality view: audio implies its transcript.
func sessionModalities(audio bool) []string {
	if audio {
		return []string{"audio"}
	}
	return []string{"text"}
}

// sessionInclude is include: the logprobs value while transcripts carry them, else null.
func sessionInclude(logprobs bool) *[]string {
	if !logprobs {
		return nil
	}
	return &[]string{protocol.IncludeLogprobs}
}

// sessionFunctionTools is the function tools; a function's parameters are the client's JSON
// schema, kept as written.
func sessionFunctionTools(tools []duplex.Tool) []any {
	out := make([]any, 0, len(tools))
	for _, t := range tools {
		w := map[string]any{"type": "function", "name": t.Name, "description": t.Description}
		if len(t.Parameters) > 0 {
			w["parameters"] = t.Parameters
		}
		out = append(out, w)
	}
	return out
}

// sessionMCPTools is the MCP tools, as the view has them (without headers or authorization).
func sessionMCPTools(servers []session.MCPServerView) []any {
	out := make([]any, 0, len(servers))
	for _, t := range servers {
		w := map[string]any{"type": "mcp", "server_label": t.Label, "server_url": t.URL}
		if t.Description != "" {
			w["server_description"] = t.Description
		}
		if len(t.AllowedTools) > 0 {
			w["allowed_tools"] = t.AllowedTools
		}
		if len(t.RequireApproval) > 0 {
			w["require_approval"] = t.RequireApproval
		}
		out = append(out, w)
	}
	return out
}

// sessionToolChoice is tool_choice: "auto" / "none" / "required", or the forced function or
// MCP tool as an object.
func sessionToolChoice(c session.ToolChoice) any {
	switch c.Mode {
	case "":
		return duplex.ToolChoiceAuto
	case duplex.ToolChoiceFunction:
		return map[string]any{"type": "function", "name": c.Function}
	case "mcp":
		w := map[string]any{"type": "mcp", "server_label": c.ServerLabel}
		if c.Function != "" {
			w["name"] = c.Function
		}
		return w
	}
	return c.Mode
}
