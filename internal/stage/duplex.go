package stage

import (
	"context"
	"fmt"
	"github.com/omniserve/omniserve/internal/duplex"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/speech"
)

// DuplexStream is the long-lived stage-0 request of a duplex session epoch: it listens (VAD +
// streaming ASR on every audio unit), keeps the conversation in one engine sequence, and speaks
// (generates, and with audio voices through the talker) on an endpoint, Commit or Respond.
//
// It owns two parts by job, and the goroutines and queues between them: the ear (duplex_ear.go:
// VAD, ASR feed, endpointing, semantic_vad pauses, partial transcripts) and the conversation
// (duplex_conversation.go: history, the KV sequence, responses, the listen/speak decision).
//
// Audio calls (AppendAudio, Commit) are serialized with each other by the ear's lock.
// Everything that touches the engine sequence (prefilling a committed turn, generating a
// response) runs in FIFO order on the stream's own sequence goroutine (loop), so audio keeps
// flowing while the assistant speaks. With a remote ASR, cut utterances are transcribed in
// order on a transcriber goroutine (duplex_asr.go).
type DuplexStream struct {
	p    *Pipeline
	opts DuplexOptions
	rid  string
	disp *dispatcher

	ear  *ear
	conv *conversation

	ctx      context.Context //nolint:containedctx // the stream's lifetime; Close cancels it
	stopLink context.CancelFunc
	jobs     chan seqJob
	loopDone chan struct{}

	// asrq feeds the transcriber goroutine (duplex_asr.go) with a remote ASR's cut utterances;
	// both nil with the local ASR. asrDone is closed when the transcriber has exited.
	asrq    chan asrJob
	asrDone chan struct{}

	closeOnce sync.Once
}

// seqJob runs on the sequence goroutine: a prefill of new history (ts nil) or a response.
type seqJob struct {
	ts        *turnState
	turn      int          // prefill job (ts nil): the turn its history leads to, fixed when queued
	spec      *speculation // set for a speculative response (ts is spec.ts)
	maxTokens int
	rspec     *duplex.ResponseSpec // set for a response with per-response options (duplex_spec.go)
	settle    bool                 // a SettleInput marker (ts nil): report InputSettled for turn
	eot       *eotJob              // an end-of-turn score (ts nil; duplex_eot.go)
}

// OpenDuplex starts a duplex stream: an engine sequence (prefilled with the instructions), a
// VAD and an ASR stream. Close it when done; ctx ending aborts its work too.
func (p *Pipeline) OpenDuplex(ctx context.Context, opts DuplexOptions, sink Sink) (*DuplexStream, error) {
	opts, err := p.duplexOptions(opts)
	if err != nil {
		return nil, err
	}
	vad, err := speech.NewVAD(opts.VAD)
	if err != nil {
		return nil, fmt.Errorf("opening duplex stream: %w", err)
	}
	asr, err := p.asr.NewStream(ctx)
	if err != nil {
		vad.Close()
		return nil, fmt.Errorf("opening duplex stream: %w", err)
	}
	var seq *gpu.Sequence // nil with a remote thinker: the conversation lives in history only
	if p.remote == nil {
		seq, err = p.deps.Engine.Open(ctx, gpu.SeqOptions{Sampling: opts.Sampling})
		if err != nil {
			asr.Close()
			vad.Close()
			return nil, fmt.Errorf("opening duplex stream: %w", err)
		}
	}
	d := p.newDuplexStream(ctx, opts, sink, vad, asr, seq)
	if err := d.start(); err != nil {
		return nil, err
	}
	return d, nil
}

// duplexOptions checks a stream's options and fills in the pipeline's defaults.
func (p *Pipeline) duplexOptions(opts DuplexOptions) (DuplexOptions, error) {
	if !p.SupportsDuplex() {
		return opts, errNoDuplex
	}
	if opts.WantAudio && p.talker == nil {
		return opts, fmt.Errorf("%w: audio output needs the talker stage", ErrInvalidRequest)
	}
	if opts.MaxTokens < 0 {
		return opts, fmt.Errorf("%w: max_tokens %d", ErrInvalidRequest, opts.MaxTokens)
	}
	if opts.TranscriptLogprobs && !p.HasTranscriptLogprobs() {
		return opts, fmt.Errorf("%w: %s", ErrInvalidRequest, errNoLogprobs)
	}
	if opts.RequestID == "" {
		opts.RequestID = "duplex-" + uuid.NewString()
	}
	if opts.MaxTokens == 0 {
		opts.MaxTokens = p.cfg.Thinker.MaxTokens
	}
	if opts.Instructions == "" {
		opts.Instructions = p.cfg.Thinker.Instructions
	}
	opts.VAD = p.vadConfig(turnVAD(opts.VAD, opts.Turn))
	if opts.AutoResponse && opts.Turn.Type == duplex.TurnSemanticVAD {
		// Pauses are found at the eagerness's minimum silence; the estimate or the silence
		// window then decides (duplex_semvad.go).
		opts.VAD.SilenceDurationMs = duplex.SemanticParams(opts.Turn.Eagerness).MinSilenceMs
	}
	return opts, nil
}

// newDuplexStream assembles a stream on what OpenDuplex opened; start runs it.
func (p *Pipeline) newDuplexStream(ctx context.Context, opts DuplexOptions, sink Sink, vad voiceDetector, asr asrStream, seq *gpu.Sequence) *DuplexStream {
	disp := newDispatcher(sink, p.cfg.SinkQueue)
	disp.remote = p.remoteNames
	sctx, stop := p.requestContext(ctx, disp.stop)
	d := &DuplexStream{
		p: p, opts: opts, rid: opts.RequestID, disp: disp,
		ctx: sctx, stopLink: stop, jobs: make(chan seqJob, p.cfg.StreamQueue), loopDone: make(chan struct{}),
	}
	d.ear = newEar(vad, asr, p.cfg.Thinker.AudioHistoryMs, opts.VAD.SilenceDurationMs, p.log)
	d.ear.logprobs = opts.TranscriptLogprobs
	d.ear.semRule, d.ear.semOn, d.ear.semAsk = p.semanticMode(opts, seq == nil, asr)
	d.conv = newConversation(sctx, p, opts, disp, seq, d.jobs)
	if _, remoteASR := asr.(asrCutter); remoteASR {
		d.asrq, d.asrDone = make(chan asrJob, p.cfg.StreamQueue), make(chan struct{})
	}
	if strings.TrimSpace(opts.Instructions) != "" && !opts.TranscribeOnly {
		d.conv.history = append(d.conv.history, gpu.ChatMessage{Role: "system", Content: opts.Instructions})
		d.jobs <- seqJob{turn: 1} // prefill the instructions now, not on the first response
	}
	return d
}

// start registers the stream with the pipeline and starts its goroutines: the dispatcher, the
// sequence goroutine and, with a remote ASR, the transcriber. On failure everything is freed.
func (d *DuplexStream) start() error {
	p := d.p
	if err := p.register(d); err != nil {
		d.release()
		return err
	}
	if err := p.goTracked(d.disp.run); err != nil {
		p.unregister(d)
		d.release()
		return err
	}
	if err := p.goTracked(d.loop); err != nil {
		d.disp.close()
		p.unregister(d)
		d.release()
		return err
	}
	if d.asrq == nil {
		return nil
	}
	if err := p.goTracked(d.transcribeLoop); err != nil {
		d.stopLink()
		<-d.loopDone
		d.disp.close()
		p.unregister(d)
		d.release()
		return err
	}
	return nil
}

func (p *Pipeline) vadConfig(v speech.VADConfig) speech.VADConfig {
	def := p.cfg.Thinker.VAD
	if v.SampleRate == 0 {
		v.SampleRate = audio.ASRSampleRate
	}
	if v.Threshold == 0 && v.Mode == 0 {
		v.Threshold, v.Mode = def.Threshold, def.Mode
	}
	if v.PrefixPaddingMs == 0 {
		v.PrefixPaddingMs = def.PrefixPaddingMs
	}
	if v.SilenceDurationMs == 0 {
		v.SilenceDurationMs = def.SilenceDurationMs
	}
	if v.MinSpeechMs == 0 {
		v.MinSpeechMs = def.MinSpeechMs
	}
	return v
}

// AppendText adds a message to the conversation (role system, developer, user or assistant,
// tool for a function's result, duplex.RoleToolCall for a call restored as the assistant's)
// as input of turn (<= 0: the current input); it is prefilled into the sequence in the
// background, after any running response, and its rows carry that turn.
func (d *DuplexStream) AppendText(ctx context.Context, turn int, role, text string) error {
	role, text, err := inputMessage(d.p.toolFormat(), role, text)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("appending text: %w", err)
	}
	return d.conv.addMessage(turn, role, text)
}

// SettleInput reports through the Sink, as a TurnEnd with InputSettled, once every row of the
// input given before the call was delivered: the listen units' snapshots (their appends
// returned before) and the prefill of the history committed so far (queued before the marker on
// the sequence goroutine). A response cancelled before it started waits for it, so that its
// turn keeps the work of the input it answered (docs/STATS.md). The marker waits behind a
// running response; it is dropped when the stream closes (the close flushes the turns), and
// refused when the job queue is full.
//
// turn is the id of the input to settle (<= 0: the current input); the report carries it.
func (d *DuplexStream) SettleInput(_ context.Context, turn int) error {
	turn, err := d.conv.settleTurn(turn)
	if err != nil {
		return fmt.Errorf("settling input: %w", err)
	}
	// Never wait for room: the caller runs in the append FIFO, which must not stall behind a
	// long response. A full queue leaves the waiting turn to its drain bound.
	select {
	case d.jobs <- seqJob{settle: true, turn: turn}:
		return nil
	case <-d.ctx.Done():
		return fmt.Errorf("settling input: %w", ErrClosed)
	default:
		return fmt.Errorf("settling input: %w: %d jobs are queued", ErrQueueFull, cap(d.jobs))
	}
}

// Respond starts the response of turn (<= 0: the current input's) and returns the id it runs
// under: turn, unless the stream already answered that input by itself (auto-response), then
// the next one. Its outputs, rows and TurnEnd carry that id. Responses queue behind a running
// one.
func (d *DuplexStream) Respond(ctx context.Context, turn, maxTokens int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("starting response: %w", err)
	}
	ts, err := d.conv.startResponse(turn, maxTokens, nil)
	if err != nil {
		return 0, err
	}
	return ts.n, nil
}

// CancelResponse aborts every unfinished response at once: the generation stops, the talker
// drops its queue, and no output of those turns reaches the Sink after it returns. Each stage
// that did work for a cancelled turn still delivers its one StageMetricsMessage of that turn
// (FinishReason "abort" unless it had finished) shortly after, before anything of a later
// turn's response. keepHistory keeps the partial reply in the conversation.
func (d *DuplexStream) CancelResponse(keepHistory bool) {
	d.conv.cancel(keepHistory, func(*turnState) bool { return true })
}

// CancelTurn aborts the response of turn n only, running or queued; a later response is untouched. It is
// for a cancel that raced the response's start: the caller learns n only after it cancelled,
// and by then the next response may already be queued behind n.
func (d *DuplexStream) CancelTurn(n int, keepHistory bool) {
	d.conv.cancel(keepHistory, func(ts *turnState) bool { return ts.n == n })
}

// Close aborts everything of the stream, frees its sequence, ASR decoder and VAD, and waits
// for its goroutines. No Sink call starts after it returns. It is idempotent. It waits for the
// Sink, so it must not be called from a Sink method (CancelResponse may be).
func (d *DuplexStream) Close() {
	d.closeOnce.Do(func() {
		d.disp.stop()
		d.conv.close()
		d.stopLink() // cancels d.ctx: the loop aborts its job, frees the sequence and exits
		<-d.loopDone
		if d.asrDone != nil {
			<-d.asrDone // the transcriber's call was cut by the same cancel
		}
		d.ear.hold()                 // no audio call in progress from here on
		d.ear.close()                // later audio calls see closed and fail with ErrClosed
		d.failQueuedTranscriptions() // a commit that queued after the transcriber exited
		d.ear.unlock()
		d.disp.close()
		<-d.disp.done
		d.p.unregister(d)
	})
}

func (d *DuplexStream) closeForShutdown() { d.Close() }

// release frees what OpenDuplex acquired when it fails after acquiring.
func (d *DuplexStream) release() {
	d.stopLink()
	if d.conv.seq != nil {
		d.conv.seq.Close()
	}
	d.ear.close()
}

// loop is the sequence goroutine: it runs prefill and response jobs in order and owns the
// sequence's lifetime.
func (d *DuplexStream) loop() {
	defer close(d.loopDone)
	if d.conv.seq != nil {
		defer d.conv.seq.Close()
	}
	for {
		select {
		case <-d.ctx.Done():
			d.dropJobs()
			return
		case j := <-d.jobs:
			d.runJob(j)
		}
	}
}

// dropJobs ends the jobs still queued when the stream closes: a response's turn ends (its
// stage places given back), an estimate fails with ErrClosed.
func (d *DuplexStream) dropJobs() {
	for {
		select {
		case j := <-d.jobs:
			if j.eot != nil {
				j.eot.res <- eotResult{err: ErrClosed}
			}
			if j.ts != nil {
				d.conv.unadmit()
				d.conv.finishTurn(j.ts)
			}
		default:
			return
		}
	}
}

// runJob runs one job on the sequence goroutine. The history is trimmed to its budget and the
// tools declaration brought up to date first, so that no job holds an index into the history
// while either moves.
func (d *DuplexStream) runJob(j seqJob) {
	c := d.conv
	if j.ts == nil && !j.settle && j.eot == nil {
		prefillBegins(c, j.turn)
	}
	c.trimHistory()
	if fitErr := d.fitJob(j); fitErr != nil {
		// The conversation cannot take the job's input with room for a reply (truncation
		// disabled, or one turn longer than the window): a response fails with the error,
		// and a prefill leaves its message in the history, not in the sequence, so that the
		// engine never drops what the session did not.
		if j.ts != nil {
			refuse(c, j, fitErr)
		}
		return
	}
	switch {
	case j.ts != nil:
		c.applyTools(j.ts.n) // a response reads the tools as they are when it starts
	case !j.settle && j.eot == nil:
		c.applyTools(j.turn)
	}
	switch {
	case j.settle:
		d.disp.inputSettled(d.rid, j.turn)
	case j.eot != nil:
		c.scoreEndOfTurn(j.eot)
	case j.ts == nil:
		_ = c.prefill(j.turn) // reported by prefill
	default:
		c.respond(j)
	}
}
