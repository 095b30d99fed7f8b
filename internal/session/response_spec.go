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
	return eng.Respond(ctx, t, duplex.ResponseSpec{MaxTokens: o.maxTokens, Instructions: o.instructions, Input: o.input, OutOfBand: o.outOfBand, Tools: o.tools,
		Temperature: o.temperature})
}

// responseInput resolves response.create's input against the conversation: messages as they
// are, references as their items' text (a user's audio item as its transcript), skipping items
// with nothing to read. It returns the messages and the audio tokens of the items referenced;
// the error names the offending entry.
func (c *conversation) responseInput(input []InputItem) ([]duplex.Message, int, *FieldError) {
	msgs := []duplex.Message{} // present: replaces the conversation, even when empty
	audioTokens := 0
	for i, in := range input {
		if in.Ref == "" {
			if !validRole(in.Role) {
				return msgs, audioTokens, &FieldError{"invalid_value", fmt.Sprintf("response.input[%d].role", i), fmt.Sprintf("unsupported item role %q", in.Role)}
			}
			msgs = append(msgs, duplex.Message{Role: in.Role, Text: in.Text})
			continue
		}
		it := c.find(in.Ref)
		if it == nil {
			return msgs, audioTokens, &FieldError{"invalid_value", fmt.Sprintf("response.input[%d].id", i),
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
		audioTokens += it.audioTokens()
		msgs = append(msgs, duplex.Message{Role: it.Role, Text: text})
	}
	return msgs, audioTokens, nil
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

// responseOptions resolves response.create's overrides against the session (its settings st,
// conversation conv and tools, the server m's limits); the error names the offending param.
func responseOptions(c *CreateResponse, st *settings, conv *conversation, tools *toolState, m *Manager) (respOptions, *FieldError) {
	cfg := st.cfg
	o := respOptions{audio: cfg.WantAudio(), maxTokens: cfg.MaxOutputTokens, format: cfg.OutputFormat, metadata: c.Metadata, temperature: c.Temperature}
	if c.Unsupported != "" {
		return o, &FieldError{"unsupported_response_option", "response." + c.Unsupported,
			fmt.Sprintf("response.%s is not supported by omniserve (see docs/REALTIME.md)", c.Unsupported)}
	}
	// The response's own instructions, conversation and input, each checked with its param
	// named.
	if c.Instructions != nil && *c.Instructions != cfg.Instructions {
		if fe := checkInstructions(*c.Instructions, "response.instructions", m.cfg.MaxInstructionsBytes, m.backend); fe != nil {
			return o, fe
		}
		o.instructions = c.Instructions
	}
	o.outOfBand = c.Conversation == "none"
	if c.Input != nil {
		var fe *FieldError
		if o.input, o.inputAudio, fe = conv.responseInput(c.Input); fe != nil {
			return o, fe
		}
		if fe := admitResponseInput(newAdmitRule(m, cfg), o.input); fe != nil {
			return o, fe
		}
	}
	if fe := o.applyOutput(c); fe != nil {
		return o, fe
	}
	// After applyOutput: a forced call must fit the response's own max_output_tokens.
	if c.ToolsSet {
		// Before resolveTools checks each tool's schema: see nextConfig.
		if fe := admitTools(newAdmitRule(m, cfg), "response.tools", c.Tools); fe != nil {
			return o, fe
		}
	}
	if fe := tools.resolveTools(cfg, c, &o, m.cfg.DefaultMaxOutputTokens); fe != nil {
		return o, fe
	}
	if fe := checkMetadata(c.Metadata); fe != nil {
		return o, fe
	}
	if o.audio && !cfg.WantAudio() {
		// The engine stream's talker is chosen with the session's modalities; a text-only
		// response on an audio session just sends no audio.
		return o, &FieldError{"invalid_value", "response.output_modalities",
			"audio responses need output_modalities [\"audio\"] in the session (session.update)"}
	}
	return o, nil
}

// applyOutput applies response.create's output overrides (modalities, max_output_tokens, the
// audio format) to o, in that order; the error names the first bad one.
func (o *respOptions) applyOutput(c *CreateResponse) *FieldError {
	if c.Modalities != nil {
		audio, fe := wantsAudio(c.Modalities)
		if fe != nil {
			return fe
		}
		o.audio = audio
	}
	if c.MaxOutputTokens != nil {
		if *c.MaxOutputTokens < 0 || *c.MaxOutputTokens > maxOutputTokensLimit {
			return &FieldError{"invalid_value", "response.max_output_tokens", "must be an integer in [1, 4096] or \"inf\""}
		}
		o.maxTokens = *c.MaxOutputTokens
	}
	if c.OutputFormat != nil {
		f, err := NormalizeOutputFormat(*c.OutputFormat)
		if err != nil {
			return &FieldError{"invalid_value", "response.audio.output.format", err.Error()}
		}
		o.format = f
	}
	return nil
}

// wantsAudio reports whether response.output_modalities asks for audio; the error is an
// unknown modality or an empty list.
func wantsAudio(modalities []string) (bool, *FieldError) {
	audio, text := false, false
	for _, m := range modalities {
		switch m {
		case "audio":
			audio = true
		case "text":
			text = true
		default:
			return false, &FieldError{"invalid_value", "response.output_modalities", fmt.Sprintf("unsupported modality %q", m)}
		}
	}
	if !audio && !text {
		return false, &FieldError{"invalid_value", "response.output_modalities", "at least one modality is required"}
	}
	return audio, nil
}

// checkMetadata refuses response.metadata beyond OpenAI's bounds: 16 pairs, keys of 64 and
// values of 512 characters.
func checkMetadata(metadata map[string]string) *FieldError {
	if len(metadata) > 16 {
		return &FieldError{"invalid_value", "response.metadata", "metadata holds at most 16 pairs"}
	}
	for k, v := range metadata {
		if len(k) > 64 || len(v) > 512 {
			return &FieldError{"invalid_value", "response.metadata", "metadata keys are at most 64 and values at most 512 characters"}
		}
	}
	return nil
}
