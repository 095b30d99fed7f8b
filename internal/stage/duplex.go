package stage

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/speech"
)

// DuplexStream is the long-lived stage-0 request of a duplex session epoch: it listens (VAD +
// streaming ASR on every audio unit), keeps the conversation in one engine sequence, and speaks
// (generates, and with audio voices through the talker) on an endpoint, Commit or Respond.
//
// Audio calls (AppendAudio, Commit) are serialized with each other. Everything that touches the
// engine sequence (prefilling a committed turn, generating a response) runs in FIFO order on
// the stream's own sequence goroutine, so audio keeps flowing while the assistant speaks.
type DuplexStream struct {
	p    *Pipeline
	opts DuplexOptions
	rid  string
	disp *dispatcher
	seq  *gpu.Sequence

	ctx      context.Context //nolint:containedctx // the stream's lifetime; Close cancels it
	stopLink context.CancelFunc
	jobs     chan seqJob
	loopDone chan struct{}

	audio audioState // guarded by audioMu
	// audioMu serializes the audio path; a channel so waiters give up on their ctx.
	audioMu chan struct{}
	// asrq feeds the transcriber goroutine (duplex_asr.go) with a remote ASR's cut utterances;
	// both nil with the local ASR. asrDone is closed when the transcriber has exited.
	asrq    chan asrJob
	asrDone chan struct{}

	mu sync.Mutex
	// input is the turn id the listen side's rows carry: the id the caller gave with its last
	// input (AppendAudio, StartCommit, AppendText), or the one after the last response the
	// stream started, whichever is higher. The caller (the session) numbers turns; the stream
	// reports its ids, never a count of its own.
	input int
	// answered is the highest turn id a response was started for: a response's id is never
	// reused, and input given with an answered id belongs to the next turn.
	answered int
	live     map[*turnState]struct{} // responses not finished
	gen      *turnState              // the response generating now
	spec     *speculation            // a response started before its endpoint (preempt.go)
	specs    specCounts
	history  []gpu.ChatMessage // the conversation as the model should see it
	fedText  string            // the rendered history already in the sequence
	// prefilled counts the tokens of prefill jobs by the turn their statistics rows are billed
	// to; the turn's response takes them into its usage (duplex_usage.go).
	prefilled map[int]int
	// tools are the stream's tools (SetTools), for the responses it starts by itself; decl
	// is their declaration in the conversation (duplex_tools.go).
	tools *duplex.ToolSpec
	decl  toolsDecl

	// semantic_vad endpointing (duplex_semvad.go), fixed at open; sem is the undecided pause
	// (guarded by audioMu). scoreEOT replaces the thinker's estimate in unit tests.
	semOn, semAsk bool
	semRule       duplex.SemanticEndpointing
	sem           *semPause
	scoreEOT      func(text string) (EndOfTurn, error)

	closeOnce sync.Once
	closed    chan struct{}
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
	if !p.SupportsDuplex() {
		return nil, errNoDuplex
	}
	if opts.WantAudio && p.talker == nil {
		return nil, fmt.Errorf("%w: audio output needs the talker stage", ErrInvalidRequest)
	}
	if opts.MaxTokens < 0 {
		return nil, fmt.Errorf("%w: max_tokens %d", ErrInvalidRequest, opts.MaxTokens)
	}
	if opts.TranscriptLogprobs && !p.HasTranscriptLogprobs() {
		return nil, fmt.Errorf("%w: %s", ErrInvalidRequest, errNoLogprobs)
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
	disp := newDispatcher(sink, p.cfg.SinkQueue)
	disp.remote = p.remoteNames
	sctx, stop := p.requestContext(ctx, disp.stop)
	d := &DuplexStream{
		p: p, opts: opts, rid: opts.RequestID, disp: disp, seq: seq,
		ctx: sctx, stopLink: stop, jobs: make(chan seqJob, p.cfg.StreamQueue), loopDone: make(chan struct{}),
		audioMu: make(chan struct{}, 1), live: map[*turnState]struct{}{}, closed: make(chan struct{}),
		prefilled: map[int]int{}, input: 1,
	}
	d.audio = newAudioState(vad, asr, p.cfg.Thinker.AudioHistoryMs)
	d.audio.logprobs = opts.TranscriptLogprobs
	d.semRule, d.semOn, d.semAsk = p.semanticMode(opts, seq == nil, asr)
	_, remoteASR := asr.(asrCutter)
	if remoteASR {
		d.asrq, d.asrDone = make(chan asrJob, p.cfg.StreamQueue), make(chan struct{})
	}
	if strings.TrimSpace(opts.Instructions) != "" && !opts.TranscribeOnly {
		d.history = append(d.history, gpu.ChatMessage{Role: "system", Content: opts.Instructions})
		d.jobs <- seqJob{turn: 1} // prefill the instructions now, not on the first response
	}
	if err := p.register(d); err != nil {
		d.release()
		return nil, err
	}
	if err := p.goTracked(d.disp.run); err != nil {
		p.unregister(d)
		d.release()
		return nil, err
	}
	if err := p.goTracked(d.loop); err != nil {
		d.disp.close()
		p.unregister(d)
		d.release()
		return nil, err
	}
	if remoteASR {
		if err := p.goTracked(d.transcribeLoop); err != nil {
			d.stopLink()
			<-d.loopDone
			d.disp.close()
			p.unregister(d)
			d.release()
			return nil, err
		}
	}
	return d, nil
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

// upcoming is the turn id that listen-side rows carry (see input).
func (d *DuplexStream) upcoming() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.input
}

// setInput takes the caller's turn id of the input it gives now (<= 0: keep the current one).
// An id whose response already started is the next turn's: the stream answered that input by
// itself (an auto-response endpoint) before the caller knew.
func (d *DuplexStream) setInput(turn int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.setInputLocked(turn)
}

func (d *DuplexStream) setInputLocked(turn int) int {
	if turn > 0 {
		d.input = max(turn, d.answered+1)
	}
	return d.input
}

// AppendText adds a message to the conversation (role system, developer, user or assistant)
// as input of turn (<= 0: the current input); it is prefilled into the sequence in the
// background, after any running response, and its rows carry that turn.
func (d *DuplexStream) AppendText(ctx context.Context, turn int, role, text string) error {
	if err := validRole(role); err != nil {
		return err
	}
	if role == "tool" {
		// A function's result (it may be empty), in the role and wrapping the chat template's
		// family gives it.
		role, text = d.p.toolFormat().resultMessage("", text)
	}
	if strings.TrimSpace(text) == "" {
		return fmt.Errorf("appending text: %w", audio.ErrEmptyText)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("appending text: %w", err)
	}
	return d.addMessage(turn, role, text)
}

// addMessage adds a message as input of turn (<= 0: the current input).
func (d *DuplexStream) addMessage(turn int, role, text string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.isClosed() {
		return fmt.Errorf("appending to stream: %w", ErrClosed)
	}
	d.dropSpecLocked("conversation changed")
	d.history = append(d.history, gpu.ChatMessage{Role: role, Content: text})
	// The rows of the prefill belong to the turn whose input the message is, fixed now: the
	// response that answers it may start before the loop runs the job.
	select {
	case d.jobs <- seqJob{turn: d.setInputLocked(turn)}:
	default:
		// A prefill job is queued or a response is pending; either syncs the whole history.
	}
	return nil
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
	d.mu.Lock()
	if d.isClosed() {
		d.mu.Unlock()
		return fmt.Errorf("settling input: %w", ErrClosed)
	}
	if turn <= 0 {
		turn = d.input
	}
	j := seqJob{settle: true, turn: turn}
	d.mu.Unlock()
	// Never wait for room: the caller runs in the append FIFO, which must not stall behind a
	// long response. A full queue leaves the waiting turn to its drain bound.
	select {
	case d.jobs <- j:
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
	ts, err := d.startResponse(turn, maxTokens)
	if err != nil {
		return 0, err
	}
	return ts.n, nil
}

func (d *DuplexStream) startResponse(turn, maxTokens int) (*turnState, error) {
	return d.startResponseSpec(turn, maxTokens, nil)
}

func (d *DuplexStream) startResponseSpec(turn, maxTokens int, rspec *duplex.ResponseSpec) (*turnState, error) {
	if maxTokens <= 0 {
		maxTokens = d.opts.MaxTokens
	}
	p := d.p
	if err := p.thinker.admit(); err != nil {
		return nil, fmt.Errorf("admitting to stage thinker: %w", err)
	}
	if err := p.admitTalker(d.opts.WantAudio); err != nil {
		p.thinker.unadmit()
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.isClosed() {
		d.unadmit()
		return nil, fmt.Errorf("starting response: %w", ErrClosed)
	}
	d.dropSpecLocked("response requested")
	ts := newTurn(d.ctx, d.setInputLocked(turn))
	select {
	case d.jobs <- seqJob{ts: ts, maxTokens: maxTokens, rspec: rspec}:
	default:
		ts.cancel()
		d.unadmit()
		return nil, fmt.Errorf("starting response: %w", ErrQueueFull)
	}
	d.answerLocked(ts.n)
	d.live[ts] = struct{}{}
	return ts, nil
}

// answerLocked records that turn n's response started: input from now on is the next turn's.
func (d *DuplexStream) answerLocked(n int) {
	d.answered = max(d.answered, n)
	d.input = max(d.input, n+1)
}

func (d *DuplexStream) unadmit() {
	d.p.thinker.unadmit()
	if d.opts.WantAudio {
		d.p.talker.unadmit()
	}
}

// CancelResponse aborts every unfinished response at once: the generation stops, the talker
// drops its queue, and no output of those turns reaches the Sink after it returns. Each stage
// that did work for a cancelled turn still delivers its one StageMetricsMessage of that turn
// (FinishReason "abort" unless it had finished) shortly after, before anything of a later
// turn's response. keepHistory keeps the partial reply in the conversation.
func (d *DuplexStream) CancelResponse(keepHistory bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.live[d.gen]; ok && d.seq != nil {
		// An unconfirmed speculation (not live yet) is not a response of the caller's.
		// Abort the engine first: its keepHistory must win over the ctx-cancel path, which keeps.
		d.seq.Abort(keepHistory)
	}
	for ts := range d.live {
		ts.abort(keepHistory)
	}
}

// CancelTurn aborts the response of turn n only, running or queued; a later response is untouched. It is
// for a cancel that raced the response's start: the caller learns n only after it cancelled,
// and by then the next response may already be queued behind n.
func (d *DuplexStream) CancelTurn(n int, keepHistory bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.live[d.gen]; ok && d.gen.n == n && d.seq != nil {
		d.seq.Abort(keepHistory)
	}
	for ts := range d.live {
		if ts.n == n {
			ts.abort(keepHistory)
		}
	}
}

// Close aborts everything of the stream, frees its sequence, ASR decoder and VAD, and waits
// for its goroutines. No Sink call starts after it returns. It is idempotent. It waits for the
// Sink, so it must not be called from a Sink method (CancelResponse may be).
func (d *DuplexStream) Close() {
	d.closeOnce.Do(func() {
		d.disp.stop()
		d.mu.Lock()
		close(d.closed)
		d.dropSpecLocked("stream closed")
		for ts := range d.live {
			ts.abort(false)
		}
		d.mu.Unlock()
		d.stopLink() // cancels d.ctx: the loop aborts its job, frees the sequence and exits
		<-d.loopDone
		if d.asrDone != nil {
			<-d.asrDone // the transcriber's call was cut by the same cancel
		}
		d.audioMu <- struct{}{}      // no audio call in progress from here on
		d.audio.close()              // later audio calls see closed and fail with ErrClosed
		d.failQueuedTranscriptions() // a commit that queued after the transcriber exited
		<-d.audioMu
		d.disp.close()
		<-d.disp.done
		d.p.unregister(d)
	})
}

func (d *DuplexStream) closeForShutdown() { d.Close() }

func (d *DuplexStream) isClosed() bool {
	select {
	case <-d.closed:
		return true
	default:
		return false
	}
}

// release frees what OpenDuplex acquired when it fails after acquiring.
func (d *DuplexStream) release() {
	d.stopLink()
	if d.seq != nil {
		d.seq.Close()
	}
	d.audio.close()
}

// loop is the sequence goroutine: it runs prefill and response jobs in order and owns the
// sequence's lifetime.
func (d *DuplexStream) loop() {
	defer close(d.loopDone)
	if d.seq != nil {
		defer d.seq.Close()
	}
	for {
		select {
		case <-d.ctx.Done():
			for {
				select {
				case j := <-d.jobs:
					if j.eot != nil {
						j.eot.res <- eotResult{err: ErrClosed}
					}
					if j.ts != nil {
						d.unadmit()
						d.finishTurn(j.ts)
					}
				default:
					return
				}
			}
		case j := <-d.jobs:
			d.trimHistory()
			switch {
			case j.ts != nil:
				d.applyTools(j.ts.n) // a response reads the tools as they are when it starts
			case !j.settle && j.eot == nil:
				d.applyTools(j.turn)
			}
			switch {
			case j.settle:
				d.disp.inputSettled(d.rid, j.turn)
			case j.eot != nil:
				d.scoreEndOfTurn(j.eot)
			case j.ts == nil:
				_ = d.prefill(j.turn) // reported by prefill
			case j.spec != nil:
				d.speculate(j.spec, j.maxTokens)
			case j.rspec != nil:
				j.rspec.MaxTokens = j.maxTokens
				d.respondSpec(j.ts, *j.rspec)
			default:
				d.respond(j.ts, j.maxTokens)
			}
		}
	}
}

// syncHistory prefills the part of the rendered history the sequence does not have yet.
func (d *DuplexStream) syncHistory(ctx context.Context, addGen bool) (gpu.AppendStats, error) {
	d.mu.Lock()
	hist := append([]gpu.ChatMessage(nil), d.history...)
	d.mu.Unlock()
	return d.syncHistoryTo(ctx, hist, addGen)
}

// syncHistoryTo prefills the part of hist's rendering the sequence does not have yet.
func (d *DuplexStream) syncHistoryTo(ctx context.Context, hist []gpu.ChatMessage, addGen bool) (gpu.AppendStats, error) {
	if d.seq == nil {
		return gpu.AppendStats{}, nil // remote thinker: each response sends the whole history
	}
	d.mu.Lock()
	fed := d.fedText
	d.mu.Unlock()
	if len(hist) == 0 && !addGen {
		return gpu.AppendStats{}, nil
	}
	want, err := d.p.deps.Engine.ChatPrompt(hist, addGen)
	if err != nil {
		return gpu.AppendStats{}, fmt.Errorf("rendering conversation: %w: %w", ErrTemplate, err)
	}
	delta, ok := strings.CutPrefix(want, fed)
	if !ok {
		// The sequence's text is no prefix of the rendering (an aborted reply left its header):
		// append the newest message rendered alone rather than re-prefilling everything.
		last := hist[max(len(hist)-1, 0):]
		if delta, err = d.p.deps.Engine.ChatPrompt(last, addGen); err != nil {
			return gpu.AppendStats{}, fmt.Errorf("rendering conversation: %w: %w", ErrTemplate, err)
		}
	}
	if delta == "" {
		return gpu.AppendStats{}, nil
	}
	st, err := d.seq.AppendText(ctx, delta)
	if err != nil {
		return gpu.AppendStats{}, fmt.Errorf("prefilling conversation: %w", err)
	}
	d.mu.Lock()
	d.fedText = want
	d.mu.Unlock()
	return st, nil
}

// prefill appends committed history and reports it as stage-0 work of turn, the turn that was
// upcoming when the history was added. A failure is reported as an Error output of turn.
func (d *DuplexStream) prefill(turn int) error {
	d.mu.Lock()
	hist := slices.Clone(d.history)
	d.mu.Unlock()
	return d.prefillHistory(turn, hist)
}

// prefillHistory is prefill of hist, the history or a head of it.
func (d *DuplexStream) prefillHistory(turn int, hist []gpu.ChatMessage) error {
	submitTS := metrics.Now()
	start := time.Now()
	st, err := d.syncHistoryTo(d.ctx, hist, false)
	if err != nil {
		if d.ctx.Err() == nil {
			d.p.log.Warn("duplex prefill failed", zap.String("request_id", d.rid), zap.Error(err))
			_ = d.disp.output(d.ctx, nil, OutputMessage{Output: duplex.Output{Kind: duplex.OutError, Turn: turn, Err: err}, RequestID: d.rid})
		}
		return err
	}
	if st.Tokens == 0 {
		return nil
	}
	d.notePrefill(turn, st.Tokens)
	if st.SubmitTS > 0 {
		submitTS = st.SubmitTS
	}
	_ = d.disp.stageMetrics(d.ctx, nil, StageMetricsMessage{
		RequestID: d.rid, StageID: 0, Turn: turn, StageSubmitTS: submitTS, FinalOutputType: finalOutputType(d.opts.WantAudio),
		Metrics: metrics.StageRequestStats{
			BatchID: int(st.BatchID), BatchSize: st.BatchSize, NumTokensIn: st.Tokens,
			StageGenTimeMs: msSince(start), OutputUnitType: "text",
		},
	})
	return nil
}

// respond runs one response: prefill the history with the generation prompt, generate, and
// fold the reply into the conversation.
func (d *DuplexStream) respond(ts *turnState, maxTokens int) {
	p := d.p
	defer d.finishTurn(ts)
	if err := p.thinker.acquire(ts.ctx); err != nil {
		if d.opts.WantAudio {
			p.talker.unadmit()
		}
		return
	}
	defer p.thinker.release()
	r := &response{rid: d.rid, ts: ts, disp: d.disp, wantAudio: d.opts.WantAudio, started: time.Now(), submitTS: metrics.Now()}
	st, err := d.syncHistory(ts.ctx, true)
	if err != nil {
		if d.opts.WantAudio {
			p.talker.unadmit()
		}
		if ts.ctx.Err() != nil || ts.aborted.Load() {
			p.abortMetrics(r, gpu.GenerateResult{}) // aborted while prefilling
			return
		}
		p.fail(r, 0, err)
		return
	}
	r.prefill = st
	r.usage = d.promptUsage(ts.n, st.Tokens, d.seq)
	d.mu.Lock()
	d.gen = ts
	at := len(d.history) // the reply answers what was there when it began
	var g generator = d.seq
	if p.remote != nil {
		g = remoteGen{t: p.remote, msgs: append([]gpu.ChatMessage(nil), d.history...), sampling: d.opts.Sampling}
	}
	d.mu.Unlock()
	text, _, _ := p.generate(r, g, gpu.GenerateOptions{MaxTokens: maxTokens})
	d.mu.Lock()
	d.gen = nil
	if text != "" && (!ts.aborted.Load() || ts.keep.Load()) {
		d.history = slices.Insert(d.history, min(at, len(d.history)), gpu.ChatMessage{Role: "assistant", Content: text})
		d.fedText += text
	}
	d.mu.Unlock()
}

func (d *DuplexStream) finishTurn(ts *turnState) {
	d.mu.Lock()
	delete(d.live, ts)
	d.mu.Unlock()
	ts.cancel()
	// Both stages returned, and each delivered its snapshot of the turn (turnMetrics) before:
	// the statistics may finalize an interrupted turn now.
	d.disp.turnEnd(ts, d.rid)
	close(ts.done)
}
