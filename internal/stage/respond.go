package stage

import (
	"context"
	"fmt"
	"github.com/omniserve/omniserve/internal/duplex"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/metrics"
)

// response is one generation of stage 0 and, with audio, its stage-1 voice: the part shared by
// chat requests and duplex responses.
type response struct {
	rid       string
	ts        *turnState
	disp      *dispatcher
	wantAudio bool
	// Set by the caller: the prefill of the prompt (its tokens count as num_tokens_in), when the
	// stage started working on the response, and its wall-clock submit time.
	prefill  gpu.AppendStats
	started  time.Time
	submitTS float64
	// usage, set by a duplex response once its prompt is in the engine, is reported as Usage
	// outputs (nil for chat requests).
	usage *duplex.Usage
	// preprocessMs is the transcription of a chat request's audio parts (its input
	// preprocessing): reported as pipeline_timings.preprocess_ms, kept out of stage_gen_time_ms.
	preprocessMs float64
	// tools, when the reply may call tools, splits its text into content and calls: only the
	// content becomes Text and reaches the talker.
	tools *toolParser
	// calls are the tool calls the reply made, in order (for the conversation's history).
	calls []duplex.ToolCall
}

// pipelineTimings is the response's pipeline_timings: preprocess_ms when its input was
// transcribed, nil otherwise (duplex responses: their ASR is stage-0 listen work).
func (r *response) pipelineTimings() map[string]float64 {
	if r.preprocessMs <= 0 {
		return nil
	}
	return map[string]float64{"preprocess_ms": r.preprocessMs}
}

// generator is one generation: a local *gpu.Sequence or a remote thinker's remoteGen.
type generator interface {
	Generate(ctx context.Context, opts gpu.GenerateOptions, emit func(gpu.Piece) error) (gpu.GenerateResult, error)
}

// generate streams the reply of seq: Text outputs from stage 0, and with audio the pieces go
// over the connector to a talker goroutine that sends Audio outputs and the Finished output.
// The caller holds a thinker worker; the talker's place must be admitted (admitTalker).
// It returns the generated text and the result; after an abort it returns the partial text
// and emits nothing more.
func (p *Pipeline) generate(r *response, seq generator, opts gpu.GenerateOptions) (string, gpu.GenerateResult, error) {
	ts := r.ts
	// The talker gets its own cancel so that a stage-0 failure can stop it without aborting
	// (and so silencing) the turn's Error output.
	talkCtx, talkCancel := context.WithCancel(ts.ctx)
	defer talkCancel()
	g := &generation{p: p, r: r, talkCancel: talkCancel}
	if r.wantAudio {
		if err := g.startTalker(talkCtx); err != nil {
			p.talker.unadmit()
			return "", gpu.GenerateResult{}, err
		}
	}
	if r.usage != nil && r.usage.InputTokens > 0 {
		u := *r.usage
		_ = r.disp.output(ts.ctx, ts, OutputMessage{Output: duplex.Output{Kind: duplex.OutUsage, Turn: ts.n, Usage: &u}, RequestID: r.rid, StageID: 0, StageSubmitTS: r.submitTS})
	}
	res, err := seq.Generate(ts.ctx, opts, g.emit)
	switch {
	case ts.ctx.Err() != nil || res.FinishReason == duplex.FinishAbort:
		// Aborted: no more outputs, but the work done so far is still reported (Generate
		// returns its partial stats at once on abort, so this does not delay the abort).
		g.abort(res)
		return g.text.String(), res, nil
	case err != nil:
		return g.text.String(), g.fail(res, err), err
	}
	res, ok := g.endTools(res)
	if !ok {
		g.abort(res)
		return g.text.String(), res, nil
	}
	g.finish(res)
	return g.text.String(), res, nil
}

// generation is one generate call's state: the talker it feeds, and the reply's text, tool
// calls and the token logprobs of text still held back.
type generation struct {
	p          *Pipeline
	r          *response
	conn       *connector
	talkCancel context.CancelFunc
	talkDone   chan struct{}
	talkFinal  *StageMetricsMessage // the talker's snapshot when the turn was aborted

	text     strings.Builder
	logprobs []gpu.TokenLogprob // of tokens whose text is still held back
	held     int                // tokens whose text is still held back
	ncalls   int
}

// startTalker starts the response's talker goroutine behind a new connector.
func (g *generation) startTalker(ctx context.Context) error {
	p := g.p
	g.conn = newConnector(0, 1, p.cfg.Connectors[0].Capacity)
	g.talkDone = make(chan struct{})
	return p.goTracked(func() {
		defer close(g.talkDone)
		g.talkFinal = p.runTalker(ctx, g.r, g.conn)
	})
}

// waitTalker waits for the talker and then delivers its abort snapshot, if any, so an aborted
// turn's rows come in stage order.
func (g *generation) waitTalker() {
	if g.talkDone == nil {
		return
	}
	<-g.talkDone
	if g.talkFinal != nil {
		g.r.disp.turnMetrics(g.r.ts, *g.talkFinal)
	}
}

// emit takes one generated piece: its text, split into content and tool calls when the reply
// may call tools, is released.
func (g *generation) emit(pc gpu.Piece) error {
	if pc.Logprob != nil {
		g.logprobs = append(g.logprobs, *pc.Logprob)
	}
	g.held++
	if pc.Text == "" {
		return nil
	}
	content := pc.Text
	var calls []duplex.ToolCall
	if g.r.tools != nil {
		content, calls = g.r.tools.feed(pc.Text)
	}
	return g.release(content, calls)
}

// release sends content (to the client and the talker) and completed tool calls.
func (g *generation) release(content string, calls []duplex.ToolCall) error {
	if content != "" {
		if err := g.sendContent(content); err != nil {
			return err
		}
	}
	r, ts := g.r, g.r.ts
	for i := range calls {
		g.ncalls++
		r.calls = append(r.calls, calls[i])
		g.held = 0 // the call's tokens are behind no text
		g.logprobs = nil
		if err := r.disp.output(ts.ctx, ts, OutputMessage{Output: duplex.Output{Kind: duplex.OutToolCall, Turn: ts.n, ToolCall: &calls[i]}, RequestID: r.rid, StageID: 0, StageSubmitTS: r.submitTS}); err != nil {
			return err
		}
	}
	return nil
}

// sendContent sends reply text as a Text output and over the connector to the talker.
func (g *generation) sendContent(content string) error {
	r, ts := g.r, g.r.ts
	g.text.WriteString(content)
	lps, n := g.logprobs, g.held
	g.logprobs, g.held = nil, 0
	if err := r.disp.output(ts.ctx, ts, OutputMessage{Output: duplex.Output{Kind: duplex.OutText, Turn: ts.n, Text: content, Tokens: n}, RequestID: r.rid, StageID: 0, Logprobs: lps, StageSubmitTS: r.submitTS}); err != nil {
		return err
	}
	if g.conn == nil {
		return nil
	}
	tx, err := g.conn.Send(ts.ctx, content)
	if err != nil {
		return err
	}
	return r.disp.transfer(ts.ctx, ts, TransferEvent{From: 0, To: 1, RequestID: r.rid, Turn: ts.n,
		SizeBytes: tx.SizeBytes, TxMs: tx.TxMs, BlockedMs: tx.BlockedMs})
}

// abort reports an aborted generation: the talker is stopped, and both stages' snapshots go out
// in stage order.
func (g *generation) abort(res gpu.GenerateResult) {
	g.talkCancel()
	g.p.abortMetrics(g.r, res)
	g.waitTalker()
}

// fail reports a failed generation and returns its result, finish reason error.
func (g *generation) fail(res gpu.GenerateResult, err error) gpu.GenerateResult {
	r := g.r
	g.talkCancel()
	g.waitTalker()
	// The tokens generated before the failure are the turn's work, as on abort: their
	// snapshot goes out before the failure, so the turn (finalized after the turn end)
	// counts them.
	res.FinishReason = duplex.FinishError
	r.disp.turnMetrics(r.ts, StageMetricsMessage{
		RequestID: r.rid, StageID: 0, Turn: r.ts.n, Metrics: thinkerStats(r, res),
		StageSubmitTS: r.submitTS, FinalOutputType: finalOutputType(r.wantAudio),
	})
	r.finalUsage(res)
	g.p.fail(r, 0, fmt.Errorf("generating: %w", err))
	return res
}

// endTools releases what the tool parser still holds at the end of the reply: held-back text
// is content after all, and a call whose closing markup never came counts. ok is false when
// the turn was aborted meanwhile.
func (g *generation) endTools(res gpu.GenerateResult) (_ gpu.GenerateResult, ok bool) {
	if g.r.tools == nil {
		return res, true
	}
	content, calls := g.r.tools.end()
	if err := g.release(content, calls); err != nil && g.r.ts.ctx.Err() != nil {
		return res, false
	}
	if g.ncalls > 0 && res.FinishReason == duplex.FinishStop {
		res.FinishReason = duplex.FinishToolCalls
	}
	return res, true
}

// finish reports a completed generation: stage 0's snapshot and usage, then the Finished
// output, from stage 0 or, with audio, from the talker once it has voiced the reply.
func (g *generation) finish(res gpu.GenerateResult) {
	r, ts := g.r, g.r.ts
	r.disp.turnMetrics(ts, StageMetricsMessage{
		RequestID: r.rid, StageID: 0, Turn: ts.n, Metrics: thinkerStats(r, res),
		StageSubmitTS: r.submitTS, FinalOutputType: finalOutputType(r.wantAudio),
	})
	r.finalUsage(res) // before the Finished output, which may come from the talker
	if g.conn == nil {
		_ = r.disp.output(ts.ctx, ts, OutputMessage{Output: duplex.Output{Kind: duplex.OutFinished, Turn: ts.n, FinishReason: res.FinishReason}, RequestID: r.rid, StageID: 0, Finished: true, StageSubmitTS: r.submitTS})
		return
	}
	if err := g.conn.End(ts.ctx, res.FinishReason); err != nil {
		g.talkCancel()
	}
	g.waitTalker()
}

// finalUsage reports a duplex response's usage with its generated tokens (the same counts as
// its stage-0 statistics). A remote thinker's prompt is known only now, from its own count.
func (r *response) finalUsage(res gpu.GenerateResult) {
	if r.usage == nil {
		return
	}
	u := *r.usage
	if u.InputTokens == 0 {
		u.InputTokens, u.CachedTokens = res.Stats.TokensIn, 0
	}
	u.OutputTokens, u.Final = res.Stats.TokensOut, true
	_ = r.disp.output(r.ts.ctx, r.ts, OutputMessage{Output: duplex.Output{Kind: duplex.OutUsage, Turn: r.ts.n, Usage: &u}, RequestID: r.rid, StageID: 0, StageSubmitTS: r.submitTS})
}

// admitTalker reserves a talker place for a response that wants audio.
func (p *Pipeline) admitTalker(wantAudio bool) error {
	if !wantAudio {
		return nil
	}
	if p.talker == nil {
		return fmt.Errorf("%w: audio output needs the talker stage", ErrInvalidRequest)
	}
	if err := p.talker.admit(); err != nil {
		return fmt.Errorf("admitting to stage talker: %w", err)
	}
	return nil
}

// fail reports a response's failure: an Error output and a Finished output with reason error.
func (p *Pipeline) fail(r *response, stageID int, err error) {
	if isAbort(err) && r.ts.ctx.Err() != nil {
		return
	}
	p.log.Warn("response failed", zap.String("request_id", r.rid), zap.Int("turn", r.ts.n),
		zap.Int("stage", stageID), zap.Error(err))
	_ = r.disp.output(r.ts.ctx, r.ts, OutputMessage{Output: duplex.Output{Kind: duplex.OutError, Turn: r.ts.n, Err: err}, RequestID: r.rid, StageID: stageID, StageSubmitTS: r.submitTS})
	_ = r.disp.output(r.ts.ctx, r.ts, OutputMessage{Output: duplex.Output{Kind: duplex.OutFinished, Turn: r.ts.n, FinishReason: duplex.FinishError, Err: err}, RequestID: r.rid, StageID: p.NumStages() - 1, Finished: true, StageSubmitTS: r.submitTS})
}

// abortMetrics delivers stage 0's snapshot of an aborted response: the tokens prefilled and
// generated so far, its time, TTFT and ITLs (res is Generate's partial result, or zero when the
// abort came before generation began).
func (p *Pipeline) abortMetrics(r *response, res gpu.GenerateResult) {
	res.FinishReason = duplex.FinishAbort
	r.disp.turnMetrics(r.ts, StageMetricsMessage{
		RequestID: r.rid, StageID: 0, Turn: r.ts.n, Metrics: thinkerStats(r, res),
		StageSubmitTS: r.submitTS, FinalOutputType: finalOutputType(r.wantAudio),
	})
}

func finalOutputType(wantAudio bool) string {
	if wantAudio {
		return "audio"
	}
	return "text"
}

// thinkerStats is stage 0's snapshot for one response.
func thinkerStats(r *response, res gpu.GenerateResult) metrics.StageRequestStats {
	st := res.Stats
	in := r.prefill.Tokens
	if in == 0 {
		in = st.TokensIn
	}
	// vLLM's TTFT runs from the request's arrival: queueing for a worker and the prompt's
	// prefill are in it. The engine's own figure starts at the generate call (after prefill).
	ttft := st.TTFTMs
	if queued := r.ts.queuedTS; ttft > 0 && queued > 0 && st.SubmitTS > queued {
		ttft += (st.SubmitTS - queued) * 1000
	}
	return metrics.StageRequestStats{
		BatchID:         int(st.BatchID),
		BatchSize:       st.BatchSize,
		NumTokensIn:     in,
		NumTokensOut:    st.TokensOut,
		StageGenTimeMs:  max(msSince(r.started)-r.preprocessMs, 0),
		FinishReason:    res.FinishReason,
		OutputUnitType:  "text",
		OutputUnitCount: st.TokensOut,
		VllmTtftMs:      ttft,
		VllmTpotMs:      st.TPOTMs,
		VllmItlMs:       mean(st.ITLsMs),
		VllmItlsMs:      append([]float64(nil), st.ITLsMs...),
		PipelineTimings: r.pipelineTimings(),
	}
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
