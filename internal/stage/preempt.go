package stage

import (
	"context"
	"github.com/omniserve/omniserve/internal/duplex"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/gpu"
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

// answers reports a speculation that the endpoint at endMs with transcript text confirms.
func (sp *speculation) answers(endMs int64, text string) bool {
	return sp.endMs == endMs && sp.transcript == text
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
	if !d.ear.hasPartial() {
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
	silent, end := d.ear.vad.TrailingSilence()
	d.conv.dropSpecIfResumed(silent, end)
	if tr := d.ear.speculationPoint(ms, silent, end); tr != "" {
		d.conv.startSpeculation(tr, end)
	}
}

// dropSpecIfResumed drops the speculation when the user spoke again since its pause: the
// trailing silence is silentMs after speech that ended at endMs.
func (c *conversation) dropSpecIfResumed(silentMs int, endMs int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sp := c.spec; sp != nil && (silentMs == 0 || endMs != sp.endMs) {
		c.dropSpecLocked("user resumed speaking")
	}
}

// startSpeculation queues a speculative response on transcript tr; it does nothing when the
// stream is busy with another response or a stage has no room.
func (c *conversation) startSpeculation(tr string, endMs int64) {
	p := c.p
	if err := p.thinker.admit(); err != nil {
		return
	}
	if err := p.admitTalker(c.opts.WantAudio); err != nil {
		p.thinker.unadmit()
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// With tools, a reply may be a call: no speculative reply (it would be spoken before the
	// reply is parsed for calls).
	if c.isClosed() || c.spec != nil || len(c.live) > 0 || c.gen != nil || c.tools != nil {
		c.unadmit()
		return
	}
	ts := newTurn(c.ctx, c.ids.input)
	ts.hold = &specHold{}
	sp := &speculation{ts: ts, transcript: tr, endMs: endMs, started: time.Now(), verdict: make(chan bool, 1)}
	select {
	case c.jobs <- seqJob{ts: ts, spec: sp, maxTokens: c.opts.MaxTokens}:
	default:
		ts.cancel()
		c.unadmit()
		return
	}
	c.spec = sp
	c.specs.started.Add(1)
	c.p.log.Debug("speculative turn started", zap.String("request_id", c.rid), zap.Int("turn", ts.n),
		zap.Int64("speech_end_ms", endMs), zap.String("transcript", tr))
}

// dropSpec discards the pending speculation, if any.
func (c *conversation) dropSpec(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropSpecLocked(why)
}

// dropSpecLocked discards the pending speculation, if any; the caller holds c.mu.
func (c *conversation) dropSpecLocked(why string) {
	sp := c.spec
	if sp == nil {
		return
	}
	c.spec = nil
	if c.gen == sp.ts && c.seq != nil {
		c.seq.Abort(false)
	}
	sp.ts.hold.discard()
	sp.ts.abort(false)
	sp.verdict <- false
	c.specs.discarded.Add(1)
	c.p.log.Debug("speculative turn discarded", zap.String("request_id", c.rid), zap.Int("turn", sp.ts.n),
		zap.String("reason", why), zap.Duration("age", time.Since(sp.started)))
}

// takeSpec hands the pending speculation to the endpoint that decides it.
func (c *conversation) takeSpec() *speculation {
	c.mu.Lock()
	defer c.mu.Unlock()
	sp := c.spec
	c.spec = nil
	return sp
}

// discardSpec discards a speculation already taken by takeSpec (nil: none).
func (c *conversation) discardSpec(sp *speculation, why string) {
	if sp == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spec = sp
	c.dropSpecLocked(why)
}

// confirmSpec makes a speculation the endpoint's turn: the Transcript output (with the
// endpoint's word logprobs, lps) goes out and the user message joins the conversation as
// commitTranscript would, the turn counts as started, and it becomes cancellable. The caller
// releases its held events after the speak decision.
func (c *conversation) confirmSpec(ctx context.Context, sp *speculation, lps []audio.WordLogprob, submitTS float64) error {
	if err := c.disp.output(ctx, nil, OutputMessage{Output: duplex.Output{Kind: duplex.OutTranscript, Turn: c.upcoming(), Text: sp.transcript, WordLogprobs: lps}, RequestID: c.rid, StageID: 0, StageSubmitTS: submitTS}); err != nil {
		c.discardSpec(sp, "transcript not delivered")
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isClosed() || sp.ts.n != c.ids.input {
		c.spec = sp
		c.dropSpecLocked("stream changed")
		return ErrClosed
	}
	c.history = append(c.history, gpu.ChatMessage{Role: "user", Content: sp.transcript, Turn: sp.ts.n})
	sp.at = len(c.history)
	c.ids.answer(sp.ts.n)
	c.live[sp.ts] = struct{}{}
	c.specs.confirmed.Add(1)
	c.p.log.Debug("speculative turn confirmed", zap.String("request_id", c.rid), zap.Int("turn", sp.ts.n),
		zap.Duration("head_start", time.Since(sp.started)))
	return nil
}

// releaseSpec delivers a confirmed speculation's held outputs.
func (c *conversation) releaseSpec(sp *speculation) {
	c.disp.release(sp.ts.hold)
	sp.verdict <- true
}
