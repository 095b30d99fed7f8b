package requestclient

import (
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/stage"
)

// The duplex vocabulary (options, turn detection, outputs, tools and tool choice) is
// internal/duplex's, passed through here as it is: this package adds only what it owns (the
// request id, the stream's sampling, the op FIFO and the turn registry).

// The chat request is the pipeline's own type (one definition, no converter): requestclient
// owns only what it adds (the request id's suffix, the event stream).
type (
	// ChatRequest is one chat completion. An empty RequestID gets a fresh chatcmpl-<hex>; Chat
	// appends -<8 hex> for the internal id.
	ChatRequest = stage.ChatRequest
	// ChatMessage is one message of a chat request (stage.ChatMessage).
	ChatMessage = stage.ChatMessage
)

// CheckTools checks that a forced call of spec (or each tool, when nothing is forced) has a
// grammar within maxTokens: the errors the pipeline would give, before a request is built.
func CheckTools(spec duplex.ToolSpec, maxTokens int) error {
	return stage.CheckTools(spec, maxTokens)
}

// Limits of the sampling parameters: the engine's, as OpenAI documents them. Callers validate
// requests against them before they reach the engine (which checks them again).
const (
	MaxPenalty     = gpu.MaxPenalty     // presence_penalty and frequency_penalty lie in [-MaxPenalty, MaxPenalty]
	MaxLogitBias   = gpu.MaxLogitBias   // logit_bias values lie in [-MaxLogitBias, MaxLogitBias]
	MaxTopLogprobs = gpu.MaxTopLogprobs // top_logprobs lies in [0, MaxTopLogprobs]
)

// JSONObjectGrammar is the GBNF grammar of response_format {"type":"json_object"}: any JSON
// object (the engine's grammar).
const JSONObjectGrammar = gpu.JSONGrammar

// SchemaGrammar converts a JSON schema to a GBNF grammar for Sampling.Grammar (response_format
// json_schema) with the engine's converter. Errors name the parameter (SamplingErrorOf).
func SchemaGrammar(schema []byte) (string, error) { return gpu.SchemaGrammar(schema) }

// Sampling selects tokens: the engine's own definition (gpu.Sampling), so that one type
// carries sampling from the API to the engine with no copy to keep in step. Temperature 0 is
// greedy; TopK 0 and TopP 0 disable those filters; RepeatPenalty 0 means 1 (off). Equal Seed and
// history give equal tokens, unless RandomSeed.
type Sampling = gpu.Sampling

// TokenLogprob is one generated token's log probability and, when asked, the most likely
// alternatives at its position (after logit_bias and penalties, before temperature, top-k /
// top-p and grammar): the engine's definition.
type TokenLogprob = gpu.TokenLogprob

// streamOptions is what the pipeline opens the stream of opts with: its resource id, and its
// sampling, the pipeline's default duplex sampling (pipeline.thinker.sampling) with the
// session's temperature and seed over it.
func streamOptions(opts duplex.Options, requestID string, base gpu.Sampling) stage.DuplexOptions {
	if opts.Temperature != nil {
		base.Temperature = float32(*opts.Temperature)
	}
	if opts.Seed != nil {
		base.Seed, base.RandomSeed = *opts.Seed, false
	}
	return stage.DuplexOptions{Options: opts, RequestID: requestID, Sampling: base}
}
