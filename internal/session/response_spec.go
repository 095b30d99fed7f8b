package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// InputItem is one entry of response.create's input: a message (Role, Text) or a reference to
// a conversation item (Ref, an item id).
type InputItem struct {
	Role, Text string
	Ref        string
}

// respond starts the engine response of o for t on eng (run from a job, off the actor).
func (o respOptions) respond(ctx context.Context, eng Engine, t requestclient.Turn) (int, error) {
	return eng.Respond(ctx, t, duplex.ResponseSpec{MaxTokens: o.maxTokens, Instructions: o.instructions, Input: o.input, OutOfBand: o.outOfBand, Tools: o.tools})
}

// resolveSpec fills o's instructions, conversation and input from response.create, each
// checked with its param named.
func (s *Session) resolveSpec(c *CreateResponse, o *respOptions) *FieldError {
	if c.Instructions != nil && *c.Instructions != s.settings.cfg.Instructions {
		if fe := checkInstructions(*c.Instructions, "response.instructions", s.m.cfg.MaxInstructionsBytes, s.m.backend); fe != nil {
			return fe
		}
		o.instructions = c.Instructions
	}
	o.outOfBand = c.Conversation == "none"
	if c.Input == nil {
		return nil
	}
	o.input = []duplex.Message{} // present: replaces the conversation, even when empty
	for i, in := range c.Input {
		if in.Ref == "" {
			if in.Role != "user" && in.Role != "system" && in.Role != "assistant" {
				return &FieldError{"invalid_value", fmt.Sprintf("response.input[%d].role", i), fmt.Sprintf("unsupported item role %q", in.Role)}
			}
			o.input = append(o.input, duplex.Message{Role: in.Role, Text: in.Text})
			continue
		}
		it := s.conv.find(in.Ref)
		if it == nil {
			return &FieldError{"invalid_value", fmt.Sprintf("response.input[%d].id", i),
				fmt.Sprintf("the item with id '%s' does not exist in the conversation", in.Ref)}
		}
		text := it.Text
		if it.Audio && it.Role == "user" {
			text = it.Transcript
		}
		if text == "" {
			// An audio item not transcribed yet, or a truncated reply: nothing to read.
			continue
		}
		o.inputAudio += it.audioTokens()
		o.input = append(o.input, duplex.Message{Role: it.Role, Text: text})
	}
	return nil
}

// outputErrorCode is the error code of an engine Error output: context_length_exceeded for a
// response context that cannot fit (a response's own input), kv_cache_full when the engine's
// shared cache ran out under load (a server capacity condition, not the client's doing), else
// engine_error.
func outputErrorCode(err error) string {
	switch {
	case errors.Is(err, requestclient.ErrContextLength):
		return "context_length_exceeded"
	case errors.Is(err, requestclient.ErrKVCacheFull):
		return "kv_cache_full"
	}
	return "engine_error"
}

// replyOptions are the options of a response the session starts itself (no response.create
// fields): the session's output settings with maxTokens.
func (c Config) replyOptions(maxTokens int) respOptions {
	return respOptions{audio: c.WantAudio(), maxTokens: maxTokens, format: c.OutputFormat}
}

// responseOptions resolves response.create's overrides against the session; the error names
// the offending param.
func (s *Session) responseOptions(c *CreateResponse) (respOptions, *FieldError) {
	o := respOptions{audio: s.settings.cfg.WantAudio(), maxTokens: s.settings.cfg.MaxOutputTokens, format: s.settings.cfg.OutputFormat, metadata: c.Metadata}
	if c.Unsupported != "" {
		return o, &FieldError{"unsupported_response_option", "response." + c.Unsupported,
			fmt.Sprintf("response.%s is not supported by omniserve (see docs/REALTIME.md)", c.Unsupported)}
	}
	if fe := s.resolveSpec(c, &o); fe != nil {
		return o, fe
	}
	if fe := s.tools.resolveTools(s.settings.cfg, c, &o, s.m.cfg.DefaultMaxOutputTokens); fe != nil {
		return o, fe
	}
	if c.Modalities != nil {
		audio, text := false, false
		for _, m := range c.Modalities {
			switch m {
			case "audio":
				audio = true
			case "text":
				text = true
			default:
				return o, &FieldError{"invalid_value", "response.output_modalities", fmt.Sprintf("unsupported modality %q", m)}
			}
		}
		if !audio && !text {
			return o, &FieldError{"invalid_value", "response.output_modalities", "at least one modality is required"}
		}
		o.audio = audio
	}
	if c.MaxOutputTokens != nil {
		if *c.MaxOutputTokens < 0 || *c.MaxOutputTokens > maxOutputTokensLimit {
			return o, &FieldError{"invalid_value", "response.max_output_tokens", "must be an integer in [1, 4096] or \"inf\""}
		}
		o.maxTokens = *c.MaxOutputTokens
	}
	if c.OutputFormat != nil {
		f, err := NormalizeOutputFormat(*c.OutputFormat)
		if err != nil {
			return o, &FieldError{"invalid_value", "response.audio.output.format", err.Error()}
		}
		o.format = f
	}
	if len(c.Metadata) > 16 {
		return o, &FieldError{"invalid_value", "response.metadata", "metadata holds at most 16 pairs"}
	}
	for k, v := range c.Metadata {
		if len(k) > 64 || len(v) > 512 {
			return o, &FieldError{"invalid_value", "response.metadata", "metadata keys are at most 64 and values at most 512 characters"}
		}
	}
	if o.audio && !s.settings.cfg.WantAudio() {
		// The engine stream's talker is chosen with the session's modalities; a text-only
		// response on an audio session just sends no audio.
		return o, &FieldError{"invalid_value", "response.output_modalities",
			"audio responses need output_modalities [\"audio\"] in the session (session.update)"}
	}
	return o, nil
}
