package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// Config configures Load. Zero fields take the defaults documented on each field.
type Config struct {
	Model        string // "dummy" | "dummy:tiny" | "dummy:0.6b" | path to a .gguf ("" = "dummy")
	CacheDir     string // dummy models; default $XDG_CACHE_HOME/omniserve or ~/.cache/omniserve
	Device       string // auto | cpu | cuda ("" = auto)
	GPULayers    int    // -1 = all layers when a GPU is used (0 = -1)
	Threads      int    // 0 = all cores but one, at least 1 (see doc.go, Threads)
	ContextSize  int    // KV cells shared by all sequences (default MaxSequences × SeqContext: every sequence's window fits)
	MaxSequences int    // KV slots = concurrent sequences (default 32)
	BatchSize    int    // max tokens per scheduler step (default 512)
	PrefillChunk int    // max prefill tokens of one sequence per step (default 128)
	SeqContext   int    // per-sequence context limit (default 2048)
	Overflow     string // "truncate" (drop oldest, keep system prefix; default) | "error"
	// FlashAttention is "auto" (default: llama.cpp decides when layers run on a GPU, off on
	// the CPU; see flashAttention), "on" or "off".
	FlashAttention string
	// DummyReplyMin and DummyReplyMax bound the lengths, in tokens (words), of a dummy model's
	// replies (default 8 and 32; dummyend.go). Real models ignore them.
	DummyReplyMin, DummyReplyMax int
}

const (
	OverflowTruncate = "truncate"
	OverflowError    = "error"
)

// Values of Config.FlashAttention.
const (
	FlashAttentionAuto = "auto"
	FlashAttentionOn   = "on"
	FlashAttentionOff  = "off"
)

func (c Config) withDefaults() (Config, error) {
	if c.Model == "" {
		c.Model = "dummy"
	}
	if c.CacheDir == "" {
		c.CacheDir = defaultCacheDir()
	}
	c.Device = strings.ToLower(c.Device)
	if c.Device == "" {
		c.Device = "auto"
	}
	switch c.Device {
	case "auto", "cpu", "cuda":
	default:
		return c, fmt.Errorf("%w: device %q (want auto, cpu or cuda)", ErrInvalidConfig, c.Device)
	}
	if c.GPULayers == 0 {
		c.GPULayers = -1
	}
	if c.Threads <= 0 {
		c.Threads = max(1, runtime.NumCPU()-1)
	}
	if c.MaxSequences <= 0 {
		c.MaxSequences = 32
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 512
	}
	if c.PrefillChunk <= 0 {
		c.PrefillChunk = 128
	}
	if c.SeqContext <= 0 {
		c.SeqContext = 2048
	}
	if c.ContextSize <= 0 {
		// Every sequence reserves its window at Open (Runner.Open), so the default cache is the
		// one that admits MaxSequences sequences: capacity is planned, never found full mid-turn.
		c.ContextSize = c.MaxSequences * c.SeqContext
	}
	// A sequence can never hold more cells than the shared cache has.
	c.SeqContext = min(c.SeqContext, c.ContextSize)
	// A step must hold one decode token per sequence.
	c.BatchSize = max(c.BatchSize, c.MaxSequences)
	c.PrefillChunk = min(c.PrefillChunk, c.BatchSize)
	if c.Overflow == "" {
		c.Overflow = OverflowTruncate
	}
	if c.Overflow != OverflowTruncate && c.Overflow != OverflowError {
		return c, fmt.Errorf("%w: overflow %q (want truncate or error)", ErrInvalidConfig, c.Overflow)
	}
	if c.DummyReplyMin <= 0 {
		c.DummyReplyMin = dummyReplyMin
		if c.DummyReplyMax > 0 {
			c.DummyReplyMin = min(dummyReplyMin, c.DummyReplyMax)
		}
	}
	if c.DummyReplyMax <= 0 {
		c.DummyReplyMax = max(dummyReplyMax, c.DummyReplyMin)
	}
	if c.DummyReplyMax < c.DummyReplyMin {
		return c, fmt.Errorf("%w: dummy reply words %d-%d (want MIN <= MAX)", ErrInvalidConfig, c.DummyReplyMin, c.DummyReplyMax)
	}
	c.FlashAttention = strings.ToLower(c.FlashAttention)
	if c.FlashAttention == "" {
		c.FlashAttention = FlashAttentionAuto
	}
	switch c.FlashAttention {
	case FlashAttentionAuto, FlashAttentionOn, FlashAttentionOff:
	default:
		return c, fmt.Errorf("%w: flash_attention %q (want auto, on or off)", ErrInvalidConfig, c.FlashAttention)
	}
	return c, nil
}

func defaultCacheDir() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "omniserve")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".cache", "omniserve")
	}
	return filepath.Join(os.TempDir(), "omniserve-cache")
}

// ModelInfo describes the loaded model and the compute it runs on.
type ModelInfo struct {
	Name        string
	Path        string
	Arch        string
	VocabSize   int
	ContextSize int      // KV cells shared by all sequences
	SeqContext  int      // default per-sequence context limit
	Backends    []string // compute backends available in this process, e.g. "CPU", "CUDA"
	Devices     []string // devices the model runs on, e.g. "CPU", "CUDA0 (GPU-…)"
	GPULayers   int      // layers offloaded to a GPU (0 on CPU)
	ChatFormat  string   // the model's template by llama.cpp name ("llama3", "gemma", ...), "gguf", "chatml" or "plain" (see doc.go)
}

// ChatMessage is one message of a chat prompt. Turn is the caller's label (the conversation
// turn the message belongs to; 0 for none); rendering ignores it.
type ChatMessage struct {
	Role, Content string
	Turn          int
}

// SeqOptions configures a sequence.
type SeqOptions struct {
	MaxContext int      // tokens this sequence may hold (0 or larger than Config.SeqContext = SeqContext)
	Sampling   Sampling // default sampling for Generate
	KeepPrefix int      // tokens at the start of the history that truncation never drops (system prompt)
}

// Sampling selects tokens. Temperature 0 is greedy; TopK 0 and TopP 0 disable those filters;
// RepeatPenalty 0 means 1 (off). Equal Seed and history give equal tokens, unless RandomSeed.
// Runner.CheckSampling validates it (errors are *SamplingError).
type Sampling struct {
	Temperature, TopP float32
	TopK              int
	Seed              uint32
	// RandomSeed draws a fresh seed for every Generate; Seed is then ignored.
	RandomSeed    bool
	RepeatPenalty float32
	// PresencePenalty and FrequencyPenalty ([-2, 2]) lower the logit of every token already
	// generated in this Generate by presence + frequency * count, as OpenAI defines them.
	PresencePenalty, FrequencyPenalty float32
	// LogitBias adds a bias ([-100, 100]) to the logits of token ids; callers must not
	// modify the map after handing it over.
	LogitBias map[int]float32
	// Grammar, a GBNF program (llama.cpp's grammar format, start rule "root"), constrains the
	// output; see JSONGrammar and SchemaGrammar.
	Grammar string
	// Logprobs attaches a TokenLogprob to every generated Piece, with TopLogprobs ([0, 20])
	// alternatives.
	Logprobs    bool
	TopLogprobs int
}

// AppendStats reports one Append. Tokens counts every token the call prefilled, which includes
// the last token of a preceding Generate (sampled but not yet in the KV cache).
type AppendStats struct {
	Tokens    int
	PrefillMs float64
	SubmitTS  float64 // wall-clock unix seconds when the call was submitted
	BatchID   int64   // the last scheduler step that carried this append
	BatchSize int     // tokens in that step
}

// GenerateOptions bounds one Generate. MaxTokens 0 means until the sequence's context limit
// (FinishReason "length"; no truncation for unbounded calls).
// Sampling, when set, replaces the sequence's sampling for this call.
// IgnoreEOS keeps the model's end of sequence from ending the generation, as vLLM's ignore_eos
// (benchmarks that need replies of a fixed length): a dummy model's drawn end is skipped, a real
// model's end-of-generation tokens are masked (which takes the Go sampler, as Logprobs does; a
// grammar still ends its reply).
type GenerateOptions struct {
	MaxTokens int
	Stop      []string
	Sampling  *Sampling
	IgnoreEOS bool
}

// Piece is one generated token. Text is the text that became final with this token: it is
// empty while the text could still be the start of a stop string, and stop strings are never
// emitted.
type Piece struct {
	Token int
	Text  string
	// Logprob is set when Sampling.Logprobs asked for it (never for the end-of-generation token).
	Logprob *TokenLogprob
}

// GenerateResult ends a Generate. FinishReason is "stop" (EOS or a stop string), "length"
// (MaxTokens or the context limit) or "abort" (Abort, ctx cancelled, or emit failed).
type GenerateResult struct {
	FinishReason string
	Stats        GenStats
}

// GenStats are the per-request engine statistics that feed stage metrics.
type GenStats struct {
	BatchID   int64 // the step that produced the first token
	BatchSize int   // tokens in that step
	TokensIn  int   // tokens prefilled by this call (pending appended input)
	TokensOut int
	PrefillMs float64
	DecodeMs  float64
	TTFTMs    float64 // submit to first token sampled
	TPOTMs    float64 // mean time per output token after the first
	ITLsMs    []float64
	SubmitTS  float64 // wall-clock unix seconds
}
