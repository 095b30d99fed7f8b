package session

import (
	"fmt"
	"strings"
	"time"
)

// settings is the session's configuration as the actor holds it: the effective Config, the
// Options it was created with, and the three facts that limit later session.updates (the
// dialect is fixed, the model was named, assistant audio fixed the voice). Its methods decide
// what a session.update makes of it without touching anything else; the session applies the
// result (noise reduction, engine reopen, tools, events). Session embeds it, so s.cfg and
// s.opts read as before.
type settings struct {
	cfg  Config
	opts Options
	// dialectFixed: the dialect can no longer change (the header chose it, or the client's
	// first event was seen).
	dialectFixed bool
	// modelNamed: the client chose the session's model name (?model= on the connection, or the
	// first session.update naming a served one); later updates may name any served name.
	modelNamed bool
	// assistantAudio: assistant audio was sent, so the voice is fixed (cannot_update_voice).
	assistantAudio bool
}

// newSettings is a new session's configuration: OpenAI's defaults (audio out, 24 kHz pcm16
// both ways, server_vad that creates and interrupts responses) over the server's. Input
// transcription is on: the ASR is the pipeline's input.
func newSettings(opts Options, server ManagerConfig) settings {
	c := settings{
		opts: opts,
		cfg: Config{
			Model:         firstNonEmpty(opts.Model, server.ModelName),
			Modalities:    []string{"audio"},
			Voice:         "alloy",
			InputFormat:   AudioFormat{Type: "pcm16", Rate: 24000},
			OutputFormat:  AudioFormat{Type: "pcm16", Rate: 24000},
			TurnDetection: server.TurnDetection.copy(),
			Transcription: true,
			IdleTimeout:   server.IdleTimeout,
			vadDefaults:   server.TurnDetection,
		},
		modelNamed: opts.Model != "",
	}
	if opts.Beta {
		c.cfg.Modalities = []string{"text", "audio"}
		c.dialectFixed = true
	}
	return c
}

// detectDialect fixes the session's dialect at the client's first event and reports whether
// that event made it a beta client. A connection without the OpenAI-Beta header or subprotocol
// is GA unless that first event is a session.update spelled in beta fields only
// (UpdateSession.BetaSpelling): then the client is a beta client, and from that event on it
// gets the beta session shape and beta event names. session.created, sent before the client
// spoke, keeps the GA shape.
func (c *settings) detectDialect(first Command) (beta bool) {
	if c.dialectFixed {
		return false
	}
	c.dialectFixed = true
	if u, ok := first.(*UpdateSession); ok && u.BetaSpelling {
		c.opts.Beta = true
		return true
	}
	return false
}

// autoResponse reports whether the engine takes turns itself: on ?duplex=1, server_vad with
// create_response is the native auto_response (the engine's VAD endpointing makes listen /
// speak decisions). Without duplex the session's own VAD commits and creates responses.
func (c *settings) autoResponse() bool { return c.autoResponseFor(c.cfg) }

func (c *settings) autoResponseFor(cfg Config) bool {
	return c.opts.Duplex && !c.opts.Transcription && cfg.TurnDetection != nil && cfg.TurnDetection.CreateResponse
}

// modelNames are the names a server serves its one model under (Manager).
type modelNames interface {
	AcceptsModel(name string) bool
	ServedModels() []string
}

// resolveModel checks a model name a session.update gives: one of the names the server
// serves its model under (served names and aliases, so the OpenAI SDKs' default names work),
// else model_not_found. The session reports the name its client chose first: the connection's
// ?model=, or else the first update's; a later served name changes nothing, as all of them
// name the one model.
func (c *settings) resolveModel(name string, models modelNames) (string, error) {
	if !models.AcceptsModel(name) {
		return "", &FieldError{"model_not_found", "session.model",
			fmt.Sprintf("The model `%s` is not served here; served: %s", name, strings.Join(models.ServedModels(), ", "))}
	}
	if c.modelNamed {
		return c.cfg.Model, nil
	}
	c.modelNamed = true
	return name, nil
}

// next is the configuration patch makes of the current one, or the first refusal among the
// checks that need nothing but the settings: the session type, the model name, the patch's own
// fields, the voice. It changes nothing but the model's naming (resolveModel). The idle timeout
// is capped by maxIdle (an overflowing value included); session.updated reports the cap.
func (c *settings) next(patch ConfigPatch, models modelNames, maxIdle time.Duration) (Config, error) {
	if fe := c.transcriptionUpdateError(patch); fe != nil {
		return c.cfg, fe
	}
	var err error
	if patch.Model != nil {
		var name string
		if name, err = c.resolveModel(*patch.Model, models); err == nil {
			patch.Model = &name
		}
	}
	next := c.cfg
	if err == nil {
		next, err = patch.Apply(c.cfg)
	}
	if next.IdleTimeout <= 0 || next.IdleTimeout > maxIdle {
		next.IdleTimeout = maxIdle
	}
	if err == nil && next.Voice != c.cfg.Voice && c.assistantAudio {
		err = &FieldError{"cannot_update_voice", "session.audio.output.voice", "Cannot update a conversation's voice if assistant audio is present."}
	}
	return next, err
}

// transcriptionUpdateError refuses what a transcription session cannot take: a switch of the
// session type either way, turning transcription off, and the conversation-only fields.
func (c *settings) transcriptionUpdateError(p ConfigPatch) *FieldError {
	if !c.opts.Transcription {
		if p.Type != nil && *p.Type == "transcription" {
			return &FieldError{"invalid_value", "session.type",
				"A conversation session cannot become a transcription session: connect with ?intent=transcription (and no model)."}
		}
		return nil
	}
	if p.Type != nil && *p.Type != "transcription" {
		return &FieldError{"invalid_value", "session.type",
			fmt.Sprintf("This is a transcription session (?intent=transcription): session.type must be \"transcription\", not %q.", *p.Type)}
	}
	if p.TranscriptionSet && !p.Transcription {
		return &FieldError{"invalid_value", "session.audio.input.transcription",
			"A transcription session transcribes: audio.input.transcription cannot be null."}
	}
	conversationOnly := []struct {
		set   bool
		param string
	}{
		{p.Instructions != nil, "session.instructions"},
		{p.Voice != nil, "session.audio.output.voice"},
		{p.OutputFormat != nil, "session.audio.output.format"},
		{p.Modalities != nil, "session.output_modalities"},
		{p.MaxOutputTokens != nil, "session.max_output_tokens"},
		{p.ToolsSet, "session.tools"},
		{p.ToolChoice != nil, "session.tool_choice"},
		{p.Temperature != nil, "session.temperature"},
	}
	for _, f := range conversationOnly {
		if f.set {
			return &FieldError{"unknown_parameter", f.param,
				fmt.Sprintf("Unknown parameter: '%s'. A transcription session has no responses.", f.param)}
		}
	}
	return nil
}

// legacyTranscription: the session events are spelled transcription_session.created /
// .updated, for a beta transcription session and for an update sent as
// transcription_session.update.
func (c *settings) legacyTranscription(legacy bool) bool {
	return c.opts.Transcription && (c.opts.Beta || legacy)
}

// temperature is the sampling temperature in force (the beta session and response objects
// tell it).
func (c *settings) temperature() float64 {
	if c.cfg.Temperature != nil {
		return *c.cfg.Temperature
	}
	return 0.8
}

// listening reports whether a VAD runs on the input (server_vad, or auto_response's silent one),
// which is when sent audio must be kept as the echo canceller's reference.
func (c *settings) listening() bool {
	return c.cfg.TurnDetection != nil || c.autoResponse()
}

// wantsLogprobs is whether transcripts should carry their words' logprobs now: include asks
// for them and the client gets transcription events (the lattice passes cost ~1.5 ms per
// utterance, not paid for nothing).
func (c *settings) wantsLogprobs() bool { return c.cfg.TranscriptLogprobs && c.sendsTranscripts() }

// sendsTranscripts reports whether the client gets input transcription events: always in a
// transcription session, in a conversation while audio.input.transcription is set.
func (c *settings) sendsTranscripts() bool { return c.opts.Transcription || c.cfg.Transcription }

// wantsDeltas is whether a stream opened now should send transcript deltas: a transcription
// session, or a conversation with input transcription on whose turns the session ends (on
// engine-endpointed turns, ?duplex=1 auto-response, the stage has no deltas to send).
func (c *settings) wantsDeltas() bool {
	return c.opts.Transcription || (c.cfg.Transcription && !c.autoResponse())
}
