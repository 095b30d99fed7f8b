package requestclient

import (
	"sync"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/stage"
)

// Options configures a Client. The zero value is usable.
type Options struct {
	// LogStats prints the statistics tables for every chat request and every duplex turn (a
	// rendering of the turn's record). When false a chat request's turn still closes with its
	// record for Collectors, and without Collectors either no turns or per-chunk copies are
	// created at all.
	LogStats bool
	// Collectors receives Prometheus observations; nil disables them.
	Collectors *metrics.Collectors
	// Clock is the wall clock for statistics; nil means metrics.Now.
	Clock metrics.Clock
	// ModelName labels logs and metrics.
	ModelName string
	// StructuredStats logs each statistics table as one structured record (fields = the
	// table's fields and ids) instead of an ASCII table: for --log-format json.
	StructuredStats bool
	// OnFinalized, when set, also receives every closed record (chat requests and duplex
	// turns) that Collectors observes: the traces of internal/tracing are built from it, so a
	// span's duration is its table figure. It is called first and returns the id of the trace
	// the record was exported in ("" when none): Collectors keeps it as the record's exemplar.
	OnFinalized func(metrics.FinalizedRequest) (traceID string)
}

// Client owns the request-state registry shared by the chat path and the duplex sessions. It is
// safe for concurrent use.
type Client struct {
	pipeline *stage.Pipeline
	opts     Options
	clock    metrics.Clock
	log      *zap.Logger

	mu     sync.Mutex
	states map[string]string // live request id -> kind ("chat" | "duplex"), for diagnostics and leak tests
}

// New returns a Client over p. log may be nil.
func New(p *stage.Pipeline, opts Options, log *zap.Logger) *Client {
	if log == nil {
		log = zap.NewNop()
	}
	clock := opts.Clock
	if clock == nil {
		clock = metrics.Now
	}
	return &Client{
		pipeline: p,
		opts:     opts,
		clock:    clock,
		log:      log.Named("requestclient"),
		states:   make(map[string]string),
	}
}

// register records a live request id; it reports false when the id is already live.
func (c *Client) register(id, kind string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.states[id]; ok {
		return false
	}
	c.states[id] = kind
	return true
}

// unregister forgets a request id; it is idempotent.
func (c *Client) unregister(id string) {
	c.mu.Lock()
	delete(c.states, id)
	c.mu.Unlock()
}

// Collectors returns the Prometheus collectors the client reports to (nil when none).
func (c *Client) Collectors() *metrics.Collectors { return c.opts.Collectors }

// Live returns the number of live request states (chat requests and duplex session epochs). Tests
// use it to prove that every path drops its state.
func (c *Client) Live() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.states)
}

// SupportsDuplex reports whether the pipeline can run duplex streams (it has an ASR).
func (c *Client) SupportsDuplex() bool {
	return c.pipeline != nil && c.pipeline.SupportsDuplex()
}

// SupportsTranscriptLogprobs reports whether duplex transcripts can carry each word's log
// posterior (duplex.Options.TranscriptLogprobs): only with the local speech recognizer.
func (c *Client) SupportsTranscriptLogprobs() bool {
	return c.pipeline != nil && c.pipeline.HasTranscriptLogprobs()
}

// CheckInstructions refuses duplex instructions that cannot fit the context window with room to
// answer (an error with ErrContextLength and ContextLengthErrorOf's figures); nil when they fit,
// or when the thinker is remote and counts its own context.
func (c *Client) CheckInstructions(text string) error {
	if c.pipeline == nil {
		return nil
	}
	return c.pipeline.CheckInstructions(text)
}

// InputWindow is the tokens a duplex stream's context window holds, what MeasureInput measures
// against (0: no local thinker; a remote one counts its own context).
func (c *Client) InputWindow() int {
	if c.pipeline == nil {
		return 0
	}
	return c.pipeline.InputWindow()
}

// MeasureInput is the tokens a duplex message of role (DuplexRequest.AppendText's) adds to the
// conversation. A text too long to fit the window fails with ErrInputTooLong (refused by its
// size, unread; InputTooLongErrorOf has the figures) or ErrContextLength (by its tokens).
func (c *Client) MeasureInput(role, text string) (int, error) {
	if c.pipeline == nil {
		return 0, nil
	}
	return c.pipeline.MeasureInput(role, text)
}

// MeasureTools is MeasureInput of the declaration of tools (DuplexRequest.SetTools).
func (c *Client) MeasureTools(tools []duplex.Tool) (int, error) {
	if c.pipeline == nil {
		return 0, nil
	}
	return c.pipeline.MeasureTools(tools)
}
