package stage

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/metrics"
)

// Preemptive generation (thinker.preemptive_ms). With server-VAD turns, the endpoint is
// confirmed only silence_duration_ms after the user's last voiced frame. When the VAD has seen
// preemptive_ms of that silence, the stream takes the ASR's hypothesis so far and starts the
// response on it at once (thinker, and with audio the talker), holding everything it produces.
// At the confirmed endpoint, a final transcript equal to the speculative one releases the held
// outputs at once, so the compute hides behind the rest of silence_duration_ms; a different one
// discards the speculation and the turn starts as without it. When the user resumes speaking
// before the endpoint (or the conversation changes: a text item, a manual response, a cleared
// buffer, close), the speculative turn is dropped without a trace: no output, no stage metrics,
// no TurnEnd (so no turn statistics row), its engine tokens rolled back, and the conversation
// history exactly as without speculation. A discard is logged at debug level only.

// holdState is where a speculative turn's events go.
type holdState int

const (
	holding   holdState = iota // kept back until the endpoint decides
	released                   // confirmed: delivered as usual
	discarded                  // dropped: the turn never existed
)

// specHold holds a speculative turn's dispatcher events until its verdict.
type specHold struct {
	mu    sync.Mutex
	state holdState
	evs   []event // bounded by the turn's outputs (max_tokens pieces and their audio)
}

// intercept reports whether the hold took ev: kept back while holding, dropped once discarded.
func (h *specHold) intercept(ev event) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch h.state {
	case holding:
		h.evs = append(h.evs, ev)
		return true
	case discarded:
		return true
	}
	return false
}

func (h *specHold) discard() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state, h.evs = discarded, nil
}

// held reports an event that a speculative turn's hold takes instead of the queue.
func (d *dispatcher) held(ev event) bool {
	return ev.turn != nil && ev.turn.hold != nil && ev.turn.hold.intercept(ev)
}

// release delivers a confirmed speculative turn's held events in order; later events of the
// turn then pass as usual (a producer that pushes meanwhile waits for the hold, so the order is
// kept). Like turnMetrics it waits for queue room regardless of a ctx: the dispatcher keeps
// draining until every producer (this caller included) has returned.
func (d *dispatcher) release(h *specHold) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != holding {
		return
	}
	for _, ev := range h.evs {
		d.ch <- ev
	}
	h.state, h.evs = released, nil
}

// speculation is a response started on a provisional transcript before the endpoint.
type speculation struct {
	ts         *turnState
	transcript string // the ASR hypothesis it answers
	endMs      int64  // the VAD speech end it assumed (the endpoint's audio_end_ms if confirmed)
	started    time.Time
	verdict    chan bool // cap 1: true confirmed, false discarded
	at         int       // confirmed: where the assistant reply goes in the history
}

// specCounts counts a stream's speculations (debug logs and tests).
type specCounts struct {
	started, confirmed, discarded atomic.Int64
}

// preemptMs is the pause after which the stream speculates, 0 when it does not.
func (d *DuplexStream) preemptMs() int {
	ms := d.opts.PreemptiveMs
	if ms == 0 {
		ms = d.p.cfg.Thinker.PreemptiveMs
	}
	if ms <= 0 || !d.opts.AutoResponse || ms >= d.opts.VAD.SilenceDurationMs {
		return 0
	}
	if _, ok := d.audio.asr.(interface{ Partial() string }); !ok {
		return 0 // the ASR cannot tell its hypothesis before the utterance ends
	}
	return ms
}

// preempt runs after a unit of an open segment was fed: a voiced frame since the speculation
// drops it; a long enough pause without one starts one. The caller holds the audio lock.
func (d *DuplexStream) preempt() {
	ms := d.preemptMs()
	if ms == 0 {
		return
	}
	a := &d.audio
	silent, end := a.vad.TrailingSilence()
	d.mu.Lock()
	if sp := d.spec; sp != nil && (silent == 0 || end != sp.endMs) {
		d.dropSpecLocked("user resumed speaking")
	}
	d.mu.Unlock()
	if silent < ms || end == a.preemptedAt {
		return
	}
	a.preemptedAt = end // one try per pause
	tr := a.asr.(interface{ Partial() string }).Partial()
	if tr == "" {
		return
	}
	d.startSpeculation(tr, end)
}

// startSpeculation queues a speculative response on transcript tr; it does nothing when the
// stream is busy with another response or a stage has no room.
func (d *DuplexStream) startSpeculation(tr string, endMs int64) {
	p := d.p
	if err := p.thinker.admit(); err != nil {
		return
	}
	if err := p.admitTalker(d.opts.WantAudio); err != nil {
		p.thinker.unadmit()
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// With tools, a reply may be a call: no speculative reply (it would be spoken before the
	// reply is parsed for calls).
	if d.isClosed() || d.spec != nil || len(d.live) > 0 || d.gen != nil || d.tools != nil {
		d.unadmit()
		return
	}
	ts := newTurn(d.ctx, d.input)
	ts.hold = &specHold{}
	sp := &speculation{ts: ts, transcript: tr, endMs: endMs, started: time.Now(), verdict: make(chan bool, 1)}
	select {
	case d.jobs <- seqJob{ts: ts, spec: sp, maxTokens: d.opts.MaxTokens}:
	default:
		ts.cancel()
		d.unadmit()
		return
	}
	d.spec = sp
	d.specs.started.Add(1)
	d.p.log.Debug("speculative turn started", zap.String("request_id", d.rid), zap.Int("turn", ts.n),
		zap.Int64("speech_end_ms", endMs), zap.String("transcript", tr))
}

// dropSpecLocked discards the pending speculation, if any; the caller holds d.mu.
func (d *DuplexStream) dropSpecLocked(why string) {
	sp := d.spec
	if sp == nil {
		return
	}
	d.spec = nil
	if d.gen == sp.ts && d.seq != nil {
		d.seq.Abort(false)
	}
	sp.ts.hold.discard()
	sp.ts.abort(false)
	sp.verdict <- false
	d.specs.discarded.Add(1)
	d.p.log.Debug("speculative turn discarded", zap.String("request_id", d.rid), zap.Int("turn", sp.ts.n),
		zap.String("reason", why), zap.Duration("age", time.Since(sp.started)))
}

// takeSpec hands the pending speculation to the endpoint that decides it.
func (d *DuplexStream) takeSpec() *speculation {
	d.mu.Lock()
	defer d.mu.Unlock()
	sp := d.spec
	d.spec = nil
	return sp
}

// discardSpec discards a speculation already taken by takeSpec.
func (d *DuplexStream) discardSpec(sp *speculation, why string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.spec = sp
	d.dropSpecLocked(why)
}

// confirmSpec makes a speculation the endpoint's turn: the Transcript output (with the
// endpoint's word logprobs, lps) goes out and the user message joins the conversation as commitTranscript would, the turn counts as started,
// and it becomes cancellable. The caller releases its held events after the speak decision.
func (d *DuplexStream) confirmSpec(ctx context.Context, sp *speculation, lps []audio.WordLogprob, submitTS float64) error {
	if err := d.disp.output(ctx, nil, OutputMessage{Output: duplex.Output{Kind: duplex.OutTranscript, Turn: d.upcoming(), Text: sp.transcript, WordLogprobs: lps}, RequestID: d.rid, StageID: 0, StageSubmitTS: submitTS}); err != nil {
		d.discardSpec(sp, "transcript not delivered")
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.isClosed() || sp.ts.n != d.input {
		d.spec = sp
		d.dropSpecLocked("stream changed")
		return ErrClosed
	}
	d.history = append(d.history, gpu.ChatMessage{Role: "user", Content: sp.transcript})
	sp.at = len(d.history)
	d.answerLocked(sp.ts.n)
	d.live[sp.ts] = struct{}{}
	d.specs.confirmed.Add(1)
	d.p.log.Debug("speculative turn confirmed", zap.String("request_id", d.rid), zap.Int("turn", sp.ts.n),
		zap.Duration("head_start", time.Since(sp.started)))
	return nil
}

// releaseSpec delivers a confirmed speculation's held outputs.
func (d *DuplexStream) releaseSpec(sp *speculation) {
	d.disp.release(sp.ts.hold)
	sp.verdict <- true
}

// speculate is the sequence goroutine's job for a speculation: the response runs as respond
// runs it, on the history plus the provisional user message, with its events held; then it
// waits for the verdict and either keeps the turn in the conversation or rolls the engine
// sequence back to where it was.
func (d *DuplexStream) speculate(sp *speculation, maxTokens int) {
	ts := sp.ts
	defer d.finishTurn(ts)
	var mark gpu.Mark
	if d.seq != nil {
		mark = d.seq.Mark()
	}
	d.mu.Lock()
	fedBefore := d.fedText
	hist := append(slices.Clone(d.history), gpu.ChatMessage{Role: "user", Content: sp.transcript})
	d.mu.Unlock()
	text, ok := d.speculativeResponse(ts, hist, maxTokens)
	confirmed := false
	select {
	case confirmed = <-sp.verdict:
	case <-d.ctx.Done():
	}
	d.mu.Lock()
	d.gen = nil
	if confirmed {
		if ok && text != "" && (!ts.aborted.Load() || ts.keep.Load()) {
			d.history = slices.Insert(d.history, min(sp.at, len(d.history)), gpu.ChatMessage{Role: "assistant", Content: text})
			d.fedText += text
		}
		d.mu.Unlock()
		return
	}
	d.fedText = fedBefore
	d.mu.Unlock()
	if d.seq == nil || d.ctx.Err() != nil {
		return
	}
	// Only this goroutine touches the sequence, so nothing runs on it until the rollback is done.
	if err := d.seq.Rollback(d.ctx, mark); err != nil {
		// The sequence keeps the speculative tokens; the next sync appends after them.
		d.p.log.Warn("rolling back a speculative turn", zap.String("request_id", d.rid), zap.Error(err))
	}
}

// speculativeResponse is respond for a speculation: it prefills hist with the generation prompt
// and generates. ok is false when it failed before generating (then, if confirmed, the turn
// ends as a failed response would).
func (d *DuplexStream) speculativeResponse(ts *turnState, hist []gpu.ChatMessage, maxTokens int) (string, bool) {
	p := d.p
	if err := p.thinker.acquire(ts.ctx); err != nil {
		if d.opts.WantAudio {
			p.talker.unadmit()
		}
		return "", false
	}
	defer p.thinker.release()
	// The user message is prefilled first and reported as the endpoint's prefill job reports
	// it, then the generation prompt: the same appends in the same chunks as without
	// speculation, so the engine computes (and a greedy reply comes out) exactly the same.
	pre := time.Now()
	st, err := d.syncHistoryTo(ts.ctx, hist, false)
	user := st.Tokens
	if err == nil && st.Tokens > 0 {
		_ = d.disp.stageMetrics(ts.ctx, ts, StageMetricsMessage{
			RequestID: d.rid, StageID: 0, Turn: ts.n, StageSubmitTS: st.SubmitTS, FinalOutputType: finalOutputType(d.opts.WantAudio),
			Metrics: metrics.StageRequestStats{
				BatchID: int(st.BatchID), BatchSize: st.BatchSize, NumTokensIn: st.Tokens,
				StageGenTimeMs: msSince(pre), OutputUnitType: "text",
			},
		})
	}
	r := &response{rid: d.rid, ts: ts, disp: d.disp, wantAudio: d.opts.WantAudio, started: time.Now(), submitTS: metrics.Now()}
	if err == nil {
		st, err = d.syncHistoryTo(ts.ctx, hist, true)
	}
	if err != nil {
		if d.opts.WantAudio {
			p.talker.unadmit()
		}
		if ts.ctx.Err() != nil || ts.aborted.Load() {
			p.abortMetrics(r, gpu.GenerateResult{})
			return "", false
		}
		p.fail(r, 0, err)
		return "", false
	}
	r.prefill = st
	r.usage = d.promptUsage(ts.n, user+st.Tokens, d.seq)
	d.mu.Lock()
	d.gen = ts
	var g generator = d.seq
	if p.remote != nil {
		g = remoteGen{t: p.remote, msgs: hist, sampling: d.opts.Sampling}
	}
	d.mu.Unlock()
	text, _, _ := p.generate(r, g, gpu.GenerateOptions{MaxTokens: maxTokens})
	return text, true
}
