package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/oaierror"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// Input and output audio rates. pcm16 follows OpenAI: raw little-endian 16-bit mono at 24 kHz, in
// both directions. The thinker's ASR wants 16 kHz, so input is resampled here.
const (
	chatPCM16Rate = 24000
	chatASRRate   = 16000
)

// chatRequestBody is the subset of OpenAI's chat completion request that omniserve reads. Fields
// whose meaning omniserve cannot honour (the legacy functions) are rejected rather than ignored,
// so a client never gets a silently different answer.
type chatRequestBody struct {
	Model               string            `json:"model"`
	Messages            []chatMessageBody `json:"messages"`
	Stream              bool              `json:"stream"`
	StreamOptions       *chatStreamOpts   `json:"stream_options"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	Temperature         *float64          `json:"temperature"`
	TopP                *float64          `json:"top_p"`
	Seed                *int64            `json:"seed"`
	Stop                json.RawMessage   `json:"stop"`
	Modalities          []string          `json:"modalities"`
	Audio               *chatAudioParams  `json:"audio"`
	User                string            `json:"user"`
	Metadata            map[string]string `json:"metadata"`

	PresencePenalty  *float64           `json:"presence_penalty"`
	FrequencyPenalty *float64           `json:"frequency_penalty"`
	LogitBias        map[string]float64 `json:"logit_bias"`
	ResponseFormat   *chatResponseFmt   `json:"response_format"`
	Logprobs         *bool              `json:"logprobs"`
	TopLogprobs      *int               `json:"top_logprobs"`
	N                *int               `json:"n"`

	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`

	// Rejected when set: the legacy form of tools.
	Functions json.RawMessage `json:"functions"`
}

// chatResponseFmt is response_format: text, json_object, or json_schema with a schema.
type chatResponseFmt struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	} `json:"json_schema"`
}

// chatMaxN bounds n: every choice is its own sequence in the engine.
const chatMaxN = 8

type chatStreamOpts struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatAudioParams struct {
	Voice  string `json:"voice"`
	Format string `json:"format"`
}

type chatMessageBody struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// Audio is OpenAI's multi-turn audio: an assistant message naming an earlier audio
	// response by id stands for that response's transcript.
	Audio *struct {
		ID string `json:"id"`
	} `json:"audio"`
	ToolCalls  json.RawMessage `json:"tool_calls"`   // assistant: the calls it made
	ToolCallID string          `json:"tool_call_id"` // tool: the call this is the result of
}

type chatContentPart struct {
	Type       string          `json:"type"`
	Text       string          `json:"text"`
	InputAudio *chatInputAudio `json:"input_audio"`
}

type chatInputAudio struct {
	Data   string `json:"data"`
	Format string `json:"format"`
}

// chatParsed is a validated request, ready for the pipeline.
type chatParsed struct {
	Model        string
	Stream       bool
	IncludeUsage bool
	WantAudio    bool
	AudioFormat  string // wav | pcm16 when WantAudio
	N            int    // choices to generate, each its own sequence
	Logprobs     bool
	Req          requestclient.ChatRequest
}

// parseChatRequest decodes and validates body. Every rejection is a 400 in OpenAI's shape naming
// the offending parameter.
// audio resolves the ids of earlier audio responses to their transcripts (nil: none known).
func parseChatRequest(body []byte, cfg *ChatConfig, audio *chatAudioStore) (*chatParsed, *oaierror.Error) {
	var in chatRequestBody
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&in); err != nil {
		return nil, oaierror.BadRequest("", "invalid_json", fmt.Sprintf("We could not parse the JSON body of your request: %v", err))
	}
	if dec.More() {
		return nil, oaierror.BadRequest("", "invalid_json", "We could not parse the JSON body of your request: trailing data after the JSON object")
	}
	out := &chatParsed{Stream: in.Stream}
	if e := checkChatModel(&in, cfg, out); e != nil {
		return nil, e
	}
	if e := checkChatUnsupported(&in); e != nil {
		return nil, e
	}
	if e := checkChatSampling(&in, cfg, out); e != nil {
		return nil, e
	}
	if e := checkChatModalities(&in, out); e != nil {
		return nil, e
	}
	if e := checkChatTools(&in, out); e != nil {
		return nil, e
	}
	if in.StreamOptions != nil {
		if !in.Stream {
			return nil, oaierror.BadRequest("stream_options", "invalid_value", "stream_options is only allowed when stream is true")
		}
		out.IncludeUsage = in.StreamOptions.IncludeUsage
	}
	msgs, e := convertChatMessages(in.Messages, audio)
	if e != nil {
		return nil, e
	}
	if e := checkToolMessages(in.Messages, msgs); e != nil {
		return nil, e
	}
	out.Req.Messages = msgs
	out.Req.WantAudio = out.WantAudio
	return out, nil
}

func checkChatModel(in *chatRequestBody, cfg *ChatConfig, out *chatParsed) *oaierror.Error {
	if in.Model == "" {
		return oaierror.BadRequest("model", "missing_required_parameter", "you must provide a model parameter")
	}
	accepted := len(cfg.Models) == 0 || slices.Contains(cfg.Models, in.Model)
	if cfg.AcceptModel != nil {
		accepted = cfg.AcceptModel(in.Model)
	}
	if !accepted {
		// 404 model_not_found is what OpenAI and vLLM answer; the SDKs raise NotFoundError.
		return &oaierror.Error{Status: 404, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
			Message: fmt.Sprintf("The model `%s` does not exist. Available models: %s", in.Model, strings.Join(cfg.Models, ", "))}
	}
	out.Model = in.Model
	if len(in.Messages) == 0 {
		return oaierror.BadRequest("messages", "missing_required_parameter", "messages must be a non-empty array")
	}
	return nil
}

func checkChatUnsupported(in *chatRequestBody) *oaierror.Error {
	if chatRawSet(in.Functions) {
		return oaierror.BadRequest("functions", "unsupported_parameter", "functions (deprecated) are not supported by this server; use tools")
	}
	return nil
}

// chatRawSet reports whether an optional JSON field carries a value other than null or empty.
func chatRawSet(r json.RawMessage) bool {
	s := strings.TrimSpace(string(r))
	return s != "" && s != "null" && s != "[]"
}

func checkChatSampling(in *chatRequestBody, cfg *ChatConfig, out *chatParsed) *oaierror.Error {
	maxTok := cfg.DefaultMaxTokens
	for _, p := range []struct {
		name string
		v    *int
	}{{"max_tokens", in.MaxTokens}, {"max_completion_tokens", in.MaxCompletionTokens}} {
		if p.v == nil {
			continue
		}
		if *p.v < 1 || *p.v > cfg.MaxTokensLimit {
			return oaierror.BadRequest(p.name, "invalid_value", fmt.Sprintf("%s must be between 1 and %d, got %d", p.name, cfg.MaxTokensLimit, *p.v))
		}
		maxTok = *p.v // max_completion_tokens wins: it is checked last, as OpenAI prefers it
		out.Req.MaxTokensSet = true
	}
	// Without a seed every completion draws its own: equal requests give different answers at
	// temperature > 0, as with OpenAI.
	s := requestclient.Sampling{Temperature: 1, TopP: 1, RandomSeed: true}
	if in.Temperature != nil {
		t := *in.Temperature
		if math.IsNaN(t) || t < 0 || t > 2 {
			return oaierror.BadRequest("temperature", "invalid_value", fmt.Sprintf("temperature must be between 0 and 2, got %g", t))
		}
		s.Temperature = float32(t)
	}
	if in.TopP != nil {
		p := *in.TopP
		if math.IsNaN(p) || p <= 0 || p > 1 {
			return oaierror.BadRequest("top_p", "invalid_value", fmt.Sprintf("top_p must be in (0, 1], got %g", p))
		}
		s.TopP = float32(p)
	}
	if in.Seed != nil {
		if *in.Seed < 0 || *in.Seed > math.MaxUint32 {
			return oaierror.BadRequest("seed", "invalid_value", fmt.Sprintf("seed must be between 0 and %d, got %d", uint64(math.MaxUint32), *in.Seed))
		}
		s.Seed = uint32(*in.Seed)
		s.RandomSeed = false
	}
	if e := checkChatPenalties(in, &s); e != nil {
		return e
	}
	if e := checkChatLogprobs(in, &s, out); e != nil {
		return e
	}
	if e := checkChatResponseFormat(in, &s); e != nil {
		return e
	}
	out.N = 1
	if in.N != nil {
		if *in.N < 1 || *in.N > chatMaxN {
			return oaierror.BadRequest("n", "invalid_value", fmt.Sprintf("n must be between 1 and %d, got %d", chatMaxN, *in.N))
		}
		out.N = *in.N
	}
	stop, e := parseChatStop(in.Stop)
	if e != nil {
		return e
	}
	out.Req.MaxTokens = maxTok
	out.Req.Sampling = s
	out.Req.Stop = stop
	return nil
}

func checkChatPenalties(in *chatRequestBody, s *requestclient.Sampling) *oaierror.Error {
	for _, p := range []struct {
		name string
		v    *float64
		dst  *float32
	}{{"presence_penalty", in.PresencePenalty, &s.PresencePenalty}, {"frequency_penalty", in.FrequencyPenalty, &s.FrequencyPenalty}} {
		if p.v == nil {
			continue
		}
		if math.IsNaN(*p.v) || *p.v < -requestclient.MaxPenalty || *p.v > requestclient.MaxPenalty {
			return oaierror.BadRequest(p.name, "invalid_value", fmt.Sprintf("%s must be between -%d and %d, got %g", p.name, requestclient.MaxPenalty, requestclient.MaxPenalty, *p.v))
		}
		*p.dst = float32(*p.v)
	}
	if len(in.LogitBias) == 0 {
		return nil
	}
	s.LogitBias = make(map[int]float32, len(in.LogitBias))
	for k, v := range in.LogitBias {
		id, err := strconv.Atoi(k)
		if err != nil || id < 0 {
			return oaierror.BadRequest("logit_bias", "invalid_value", fmt.Sprintf("logit_bias keys must be token ids (non-negative integers), got %q", k))
		}
		if math.IsNaN(v) || v < -requestclient.MaxLogitBias || v > requestclient.MaxLogitBias {
			return oaierror.BadRequest("logit_bias", "invalid_value", fmt.Sprintf("logit_bias values must be between -%d and %d, got %g for token %d", requestclient.MaxLogitBias, requestclient.MaxLogitBias, v, id))
		}
		s.LogitBias[id] = float32(v) // ids outside the vocabulary are refused by the engine
	}
	return nil
}

func checkChatLogprobs(in *chatRequestBody, s *requestclient.Sampling, out *chatParsed) *oaierror.Error {
	if in.Logprobs != nil && *in.Logprobs {
		s.Logprobs, out.Logprobs = true, true
	}
	if in.TopLogprobs == nil {
		return nil
	}
	if *in.TopLogprobs < 0 || *in.TopLogprobs > requestclient.MaxTopLogprobs {
		return oaierror.BadRequest("top_logprobs", "invalid_value", fmt.Sprintf("top_logprobs must be between 0 and %d, got %d", requestclient.MaxTopLogprobs, *in.TopLogprobs))
	}
	if *in.TopLogprobs > 0 && !s.Logprobs {
		return oaierror.BadRequest("top_logprobs", "invalid_value", "top_logprobs requires logprobs to be true")
	}
	s.TopLogprobs = *in.TopLogprobs
	return nil
}

// checkChatResponseFormat turns response_format into a grammar the sampler enforces, so the
// output parses whatever the model is (a truncated answer, finish_reason length, may not).
func checkChatResponseFormat(in *chatRequestBody, s *requestclient.Sampling) *oaierror.Error {
	f := in.ResponseFormat
	if f == nil {
		return nil
	}
	switch f.Type {
	case "text":
	case "json_object":
		s.Grammar = requestclient.JSONObjectGrammar
	case "json_schema":
		if f.JSONSchema == nil {
			return oaierror.BadRequest("response_format.json_schema", "missing_required_parameter", "response_format of type json_schema needs json_schema")
		}
		if f.JSONSchema.Name == "" {
			return oaierror.BadRequest("response_format.json_schema.name", "missing_required_parameter", "json_schema.name is required")
		}
		if !chatRawSet(f.JSONSchema.Schema) {
			s.Grammar = requestclient.JSONObjectGrammar // no schema: any JSON object
			return nil
		}
		if e := checkSchemaBound("response_format.json_schema.schema", f.JSONSchema.Schema); e != nil {
			return e
		}
		g, err := requestclient.SchemaGrammar(f.JSONSchema.Schema)
		if err != nil {
			return oaierror.BadRequest("response_format.json_schema.schema", "invalid_value", fmt.Sprintf("invalid JSON schema: %v", err))
		}
		s.Grammar = g
	case "":
		return oaierror.BadRequest("response_format.type", "missing_required_parameter", "response_format.type is required")
	default:
		return oaierror.BadRequest("response_format.type", "invalid_value", fmt.Sprintf("unsupported response_format type %q; use text, json_object or json_schema", f.Type))
	}
	return nil
}

// parseChatStop accepts OpenAI's string-or-list form; at most 4 sequences, none empty.
func parseChatStop(raw json.RawMessage) ([]string, *oaierror.Error) {
	if !chatRawSet(raw) {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, oaierror.BadRequest("stop", "invalid_value", "stop sequences must not be empty")
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, oaierror.BadRequest("stop", "invalid_type", "stop must be a string or an array of strings")
	}
	if len(list) > 4 {
		return nil, oaierror.BadRequest("stop", "invalid_value", fmt.Sprintf("at most 4 stop sequences are allowed, got %d", len(list)))
	}
	for _, s := range list {
		if s == "" {
			return nil, oaierror.BadRequest("stop", "invalid_value", "stop sequences must not be empty")
		}
	}
	return list, nil
}

func checkChatModalities(in *chatRequestBody, out *chatParsed) *oaierror.Error {
	for _, m := range in.Modalities {
		switch m {
		case "text":
		case "audio":
			out.WantAudio = true
		default:
			return oaierror.BadRequest("modalities", "invalid_value", fmt.Sprintf("unsupported modality %q; use [\"text\"] or [\"text\",\"audio\"]", m))
		}
	}
	if len(in.Modalities) > 0 && !slices.Contains(in.Modalities, "text") {
		return oaierror.BadRequest("modalities", "invalid_value", "modalities must include \"text\"")
	}
	if !out.WantAudio {
		return nil
	}
	out.AudioFormat = "wav"
	if in.Audio != nil && in.Audio.Format != "" {
		out.AudioFormat = in.Audio.Format
	}
	switch out.AudioFormat {
	case "wav", "pcm16":
	default:
		return oaierror.BadRequest("audio.format", "unsupported_value", fmt.Sprintf("unsupported audio format %q; use wav or pcm16", out.AudioFormat))
	}
	// As with OpenAI, streamed audio is raw pcm16 chunks; a WAV header per chunk would not play.
	if in.Stream && out.AudioFormat != "pcm16" {
		return oaierror.BadRequest("audio.format", "unsupported_value", "streaming audio output requires audio.format \"pcm16\"")
	}
	return nil
}

// convertChatMessages turns wire messages into pipeline messages, decoding input audio to 16 kHz.
func convertChatMessages(in []chatMessageBody, audio *chatAudioStore) ([]requestclient.ChatMessage, *oaierror.Error) {
	out := make([]requestclient.ChatMessage, 0, len(in))
	for i, m := range in {
		param := fmt.Sprintf("messages[%d]", i)
		role := m.Role
		switch role {
		case "system", "user", "assistant", "tool":
		case "developer": // newer OpenAI clients send developer for system instructions
			role = "system"
		case "":
			return nil, oaierror.BadRequest(param+".role", "missing_required_parameter", "each message needs a role")
		default:
			return nil, oaierror.BadRequest(param+".role", "unsupported_value", fmt.Sprintf("unsupported role %q; use system, user, assistant or tool", m.Role))
		}
		msg := requestclient.ChatMessage{Role: role, ToolCallID: m.ToolCallID}
		if e := fillChatContent(&msg, m.Content, param); e != nil {
			return nil, e
		}
		if chatRawSet(m.ToolCalls) {
			if role != "assistant" {
				return nil, oaierror.BadRequest(param+".tool_calls", "invalid_value", "tool_calls are only allowed in assistant messages")
			}
			calls, e := parseAssistantToolCalls(m.ToolCalls, param+".tool_calls")
			if e != nil {
				return nil, e
			}
			msg.ToolCalls = calls
		}
		if role == "tool" {
			out = append(out, msg) // a tool's result may be empty
			continue
		}
		if m.Audio != nil {
			if e := resolveChatAudio(&msg, m.Audio.ID, param+".audio", audio); e != nil {
				return nil, e
			}
		}
		if strings.TrimSpace(msg.Text) == "" && len(msg.Audio) == 0 && len(msg.ToolCalls) == 0 {
			if role == "assistant" {
				return nil, oaierror.BadRequest(param+".content", "invalid_value", "an assistant message needs content or audio: {id} of an earlier audio response")
			}
			return nil, oaierror.BadRequest(param+".content", "invalid_value", role+" message content must not be empty")
		}
		out = append(out, msg)
	}
	return out, nil
}

// resolveChatAudio replaces an assistant message's audio reference by the transcript of that
// earlier response.
func resolveChatAudio(msg *requestclient.ChatMessage, id, param string, audio *chatAudioStore) *oaierror.Error {
	if msg.Role != "assistant" {
		return oaierror.BadRequest(param, "invalid_value", "audio: {id} is only allowed in assistant messages")
	}
	if id == "" {
		return oaierror.BadRequest(param+".id", "missing_required_parameter", "audio.id is required")
	}
	tr, ok := "", false
	if audio != nil {
		tr, ok = audio.get(id)
	}
	if !ok {
		return oaierror.BadRequest(param+".id", "invalid_value", fmt.Sprintf("Audio with id %q was not found (unknown or expired; audio ids expire at expires_at)", id))
	}
	msg.Text = strings.TrimSpace(strings.TrimSpace(msg.Text) + " " + tr)
	return nil
}

func fillChatContent(msg *requestclient.ChatMessage, raw json.RawMessage, param string) *oaierror.Error {
	param += ".content"
	if !chatRawSet(raw) {
		return nil // assistant messages may carry null content
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		msg.Text = s
		return nil
	}
	var parts []chatContentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return oaierror.BadRequest(param, "invalid_type", "content must be a string or an array of content parts")
	}
	var texts []string
	for j, p := range parts {
		pp := fmt.Sprintf("%s[%d]", param, j)
		switch p.Type {
		case "text":
			texts = append(texts, p.Text)
		case "input_audio":
			if msg.Role != "user" {
				return oaierror.BadRequest(pp, "unsupported_value", "input_audio is only allowed in user messages")
			}
			pcm, e := decodeChatInputAudio(p.InputAudio, pp+".input_audio")
			if e != nil {
				return e
			}
			msg.Audio = append(msg.Audio, pcm...)
		case "image_url", "image", "file", "video_url":
			return oaierror.BadRequest(pp, "unsupported_content_type", fmt.Sprintf("content part type %q is not supported; this server accepts text and input_audio", p.Type))
		default:
			return oaierror.BadRequest(pp+".type", "invalid_value", fmt.Sprintf("unknown content part type %q", p.Type))
		}
	}
	msg.Text = strings.Join(texts, "\n")
	return nil
}

// decodeChatInputAudio decodes base64 WAV (any mono/stereo rate the resampler knows) or pcm16
// (24 kHz mono s16le, OpenAI's convention) to 16 kHz float32.
func decodeChatInputAudio(a *chatInputAudio, param string) ([]float32, *oaierror.Error) {
	if a == nil || a.Data == "" {
		return nil, oaierror.BadRequest(param+".data", "invalid_value", "input_audio.data must be non-empty base64 audio")
	}
	raw, err := base64.StdEncoding.DecodeString(a.Data)
	if err != nil {
		return nil, oaierror.BadRequest(param+".data", "invalid_value", fmt.Sprintf("input_audio.data is not valid base64: %v", err))
	}
	var pcm []float32
	rate := chatPCM16Rate
	switch a.Format {
	case "wav":
		pcm, rate, err = audio.DecodeWAV(raw)
	case "pcm16":
		pcm, err = audio.PCM16BytesToFloat32(nil, raw)
	default:
		return nil, oaierror.BadRequest(param+".format", "unsupported_value", fmt.Sprintf("unsupported input_audio format %q; use wav or pcm16", a.Format))
	}
	if err != nil {
		return nil, oaierror.BadRequest(param+".data", "invalid_value", fmt.Sprintf("input_audio could not be decoded as %s: %v", a.Format, err))
	}
	if len(pcm) == 0 {
		return nil, oaierror.BadRequest(param+".data", "invalid_value", "input_audio contains no samples")
	}
	if err := audio.CheckFinite(pcm); err != nil {
		return nil, oaierror.BadRequest(param+".data", "invalid_value", fmt.Sprintf("input_audio: %v", err))
	}
	if rate != chatASRRate {
		pcm, err = audio.Resample(pcm, rate, chatASRRate)
		if err != nil {
			msg := fmt.Sprintf("input_audio sample rate %d Hz cannot be converted: %v", rate, err)
			if errors.Is(err, audio.ErrUnsupportedRate) {
				msg = fmt.Sprintf("input_audio sample rate %d Hz is not supported; use %d to %d Hz", rate, audio.MinRate, audio.MaxRate)
			}
			return nil, oaierror.BadRequest(param+".data", "invalid_value", msg)
		}
	}
	return pcm, nil
}
