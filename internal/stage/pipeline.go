package stage

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/speech"
)

// Deps are the engines the stages run on; the caller owns and closes them after Pipeline.Close.
type Deps struct {
	Engine *gpu.Runner // required unless the thinker is remote (PipelineConfig.NeedsLocalEngine)
	ASR    *speech.ASR // for duplex streams and audio chat parts, unless the ASR is remote
	TTS    *speech.TTS // required when the graph has a talker, unless the TTS is remote
}

// Pipeline runs the stage graph: stage 0 thinker (VAD + ASR + LLM) and stage 1 talker (TTS),
// joined by a connector per request. It is safe for concurrent use.
type Pipeline struct {
	cfg     PipelineConfig
	deps    Deps
	log     *zap.Logger
	thinker *slots
	talker  *slots // nil without a talker stage
	// The backends the stages run on: local (deps) or remote (cfg.Remote). remote is nil when
	// the thinker's LLM is the local engine.
	asr    asrBackend // nil: no duplex, no audio input
	tts    ttsBackend // nil without a talker stage
	remote *remoteThinker
	// remoteNames is each stage's `remote` statistics row (remoteNames()).
	remoteNames [2]string

	ctx    context.Context //nolint:containedctx // base lifetime of every request; Close cancels it
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	live   map[closer]struct{} // open requests and streams, closed by Close
	wg     sync.WaitGroup      // every goroutine the pipeline started
}

type closer interface{ closeForShutdown() }

// New checks the graph against the engines it needs and returns a running pipeline.
func New(cfg PipelineConfig, deps Deps, log *zap.Logger) (*Pipeline, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if len(cfg.Stages) == 0 {
		cfg = DefaultPipelineConfig()
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("creating pipeline: %w", err)
	}
	p := &Pipeline{cfg: cfg, deps: deps, log: log.Named("stage"), live: map[closer]struct{}{}}
	if err := p.selectBackends(); err != nil {
		return nil, fmt.Errorf("creating pipeline: %w", err)
	}
	p.remoteNames = remoteNames(cfg.Remote)
	p.thinker = newSlots(cfg.Stages[0].Workers, cfg.Stages[0].QueueSize)
	if len(cfg.Stages) > 1 {
		if p.tts == nil {
			return nil, fmt.Errorf("creating pipeline: %w: stage talker needs a TTS", errConfig)
		}
		if p.tts.OutputRate() != cfg.Talker.OutputRate {
			return nil, fmt.Errorf("creating pipeline: %w: TTS rate %d, talker.output_rate %d",
				errConfig, p.tts.OutputRate(), cfg.Talker.OutputRate)
		}
		p.talker = newSlots(cfg.Stages[1].Workers, cfg.Stages[1].QueueSize)
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.log.Info("pipeline ready", zap.Int("stages", len(cfg.Stages)),
		zap.Int("thinker_workers", cfg.Stages[0].Workers), zap.Bool("duplex", p.SupportsDuplex()))
	return p, nil
}

// NumStages is 2 for the default graph (0 thinker, 1 talker), 1 without a talker.
func (p *Pipeline) NumStages() int { return len(p.cfg.Stages) }

// SupportsDuplex reports whether OpenDuplex works: it needs the ASR.
func (p *Pipeline) SupportsDuplex() bool { return p.asr != nil }

// Close aborts every open request and stream, stops the workers and waits for them.
// Requests get no further Sink calls. It is idempotent.
func (p *Pipeline) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return
	}
	p.closed = true
	live := make([]closer, 0, len(p.live))
	for c := range p.live {
		live = append(live, c)
	}
	p.mu.Unlock()
	p.cancel()
	for _, c := range live {
		c.closeForShutdown()
	}
	p.wg.Wait()
	p.closeRemotes()
	p.log.Info("pipeline closed")
}

// register adds an open request or stream, or fails when the pipeline is closed.
func (p *Pipeline) register(c closer) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("opening request: %w", ErrClosed)
	}
	p.live[c] = struct{}{}
	return nil
}

func (p *Pipeline) unregister(c closer) {
	p.mu.Lock()
	delete(p.live, c)
	p.mu.Unlock()
}

// goTracked starts f in a goroutine that Close waits for; it fails once the pipeline is closed
// (so no goroutine starts after Close began waiting).
func (p *Pipeline) goTracked(f func()) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("starting stage work: %w", ErrClosed)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
	return nil
}

// requestContext derives a request's context from the pipeline's (Close cancels it) and the
// caller's: when the caller's ends, onAbort runs (it silences the Sink) and the request is
// cancelled. The returned stop releases the link and cancels the request's context.
func (p *Pipeline) requestContext(ctx context.Context, onAbort func()) (context.Context, context.CancelFunc) {
	rctx, cancel := context.WithCancel(p.ctx)
	// The request runs under the pipeline's context, not the caller's; its W3C trace context
	// comes along so remote stages send it on (remote.go once).
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		rctx = trace.ContextWithSpanContext(rctx, sc)
	}
	stop := context.AfterFunc(ctx, func() {
		onAbort()
		cancel()
	})
	return rctx, func() {
		stop()
		cancel()
	}
}

// slots bounds how many requests a stage works on (workers) and how many may wait (queue).
type slots struct {
	sem     chan struct{}
	mu      sync.Mutex
	pending int // admitted: running + waiting
	limit   int // workers + queue
}

func newSlots(workers, queue int) *slots {
	return &slots{sem: make(chan struct{}, workers), limit: workers + queue}
}

// admit reserves a place (running or waiting) or fails with ErrQueueFull at once, so a full
// stage answers immediately instead of piling up waiters.
func (s *slots) admit() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending >= s.limit {
		return ErrQueueFull
	}
	s.pending++
	return nil
}

// acquire waits for a worker; the caller must have admitted. On error the admission is undone.
func (s *slots) acquire(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		s.unadmit()
		return ctx.Err()
	}
}

// release frees the worker and the admission.
func (s *slots) release() {
	<-s.sem
	s.unadmit()
}

func (s *slots) unadmit() {
	s.mu.Lock()
	s.pending--
	s.mu.Unlock()
}

// Pending is admitted requests (running and waiting), for tests and gauges.
func (s *slots) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending
}

// running is requests holding a worker now.
func (s *slots) running() int { return len(s.sem) }

// StageLoad is one stage's admitted work at a moment.
type StageLoad struct {
	Stage            int
	Running, Waiting int
}

// Load reports, per stage, the requests holding a worker and those admitted and waiting for
// one (Prometheus queue / running gauges).
func (p *Pipeline) Load() []StageLoad {
	var out []StageLoad
	for i, sl := range []*slots{p.thinker, p.talker} {
		if sl == nil {
			continue
		}
		run := sl.running()
		out = append(out, StageLoad{Stage: i, Running: run, Waiting: max(sl.Pending()-run, 0)})
	}
	return out
}

func isAbort(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
