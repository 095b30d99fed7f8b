package stage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/gpu"
	"github.com/omniserve/omniserve/internal/metrics"
)

// Request is one chat request in flight.
type Request struct {
	p    *Pipeline
	req  ChatRequest
	disp *dispatcher
	ts   *turnState
	stop context.CancelFunc // releases the link to the caller's ctx
	done chan struct{}

	mu  sync.Mutex
	seq *gpu.Sequence // while generating, so Abort can stop it at once
}

// SubmitChat validates req and starts it: stage 0 transcribes audio parts, builds the prompt
// with the model's chat template, and streams text; with WantAudio stage 1 streams 24 kHz
// audio. The Sink gets the outputs and ends with a Finished output, unless the request is
// aborted (Abort, or ctx cancelled): then it gets no more outputs, only the stages' final
// metrics (see Abort). Bad input fails here.
func (p *Pipeline) SubmitChat(ctx context.Context, req ChatRequest, sink Sink) (*Request, error) {
	if err := p.validateChat(&req); err != nil {
		return nil, err
	}
	if err := p.thinker.admit(); err != nil {
		return nil, fmt.Errorf("admitting to stage thinker: %w", err)
	}
	if err := p.admitTalker(req.WantAudio); err != nil {
		p.thinker.unadmit()
		return nil, err
	}
	disp := newDispatcher(sink, p.cfg.SinkQueue)
	disp.remote = p.remoteNames
	rctx, stop := p.requestContext(ctx, disp.stop)
	r := &Request{
		p: p, req: req, disp: disp,
		ts: newTurn(rctx, 1), stop: stop, done: make(chan struct{}),
	}
	unadmit := func() {
		p.thinker.unadmit()
		if req.WantAudio {
			p.talker.unadmit()
		}
		stop()
	}
	if err := p.register(r); err != nil {
		unadmit()
		return nil, err
	}
	if err := p.goTracked(r.disp.run); err != nil {
		p.unregister(r)
		unadmit()
		return nil, err
	}
	if err := p.goTracked(r.run); err != nil {
		r.disp.close()
		p.unregister(r)
		unadmit()
		return nil, err
	}
	return r, nil
}

func (p *Pipeline) validateChat(req *ChatRequest) error {
	if len(req.Messages) == 0 {
		return fmt.Errorf("%w: no messages", ErrInvalidRequest)
	}
	if req.RequestID == "" {
		req.RequestID = "chatcmpl-" + strings.ReplaceAll(uuid.NewString(), "-", "")
	}
	hasAudio := false
	for i, m := range req.Messages {
		hasAudio = hasAudio || len(m.Audio) > 0
		if err := p.validMessage(i, m); err != nil {
			return err
		}
	}
	if req.MaxTokens < 0 {
		return fmt.Errorf("%w: max_tokens %d", ErrInvalidRequest, req.MaxTokens)
	}
	if req.MaxTokens == 0 {
		req.MaxTokens = p.cfg.Thinker.MaxTokens
	}
	// Bad sampling (a logit_bias token outside the vocabulary, a grammar that does not
	// compile) is refused here, before anything streams: a *gpu.SamplingError names the field.
	if p.remote != nil {
		return remoteChatUnsupported(req)
	}
	if err := p.toolGrammar(req); err != nil {
		return err
	}
	if err := p.deps.Engine.CheckSampling(&req.Sampling); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	if hasAudio {
		return nil // the prompt is known after transcription: prepare checks it
	}
	texts := make([]string, len(req.Messages))
	for i, m := range req.Messages {
		texts[i] = m.Text
	}
	prompt, err := p.deps.Engine.ChatPrompt(p.toolFormat().promptMessages(req.Tools, req.Messages, texts), true)
	if err != nil {
		return fmt.Errorf("rendering chat prompt: %w", err)
	}
	return p.checkPromptFits(prompt, req)
}

// validMessage checks message i of a chat request: its role, and its audio or its text.
func (p *Pipeline) validMessage(i int, m ChatMessage) error {
	if err := validRole(m.Role); err != nil {
		return fmt.Errorf("message %d: %w", i, err)
	}
	if len(m.Audio) > 0 {
		if p.asr == nil {
			return fmt.Errorf("message %d: %w: audio input needs the ASR", i, ErrInvalidRequest)
		}
		if err := audio.CheckFinite(m.Audio); err != nil {
			return fmt.Errorf("message %d audio: %w", i, err)
		}
		return nil
	}
	if m.Audio != nil {
		return fmt.Errorf("message %d audio: %w", i, audio.ErrEmptyAudio)
	}
	// A tool's result may be empty, as may the text of an assistant's calls.
	if strings.TrimSpace(m.Text) == "" && m.Role != "tool" && len(m.ToolCalls) == 0 {
		return fmt.Errorf("message %d: %w", i, audio.ErrEmptyText)
	}
	return nil
}

// remoteChatUnsupported refuses what a remote thinker is not sent: the remote engine counts its
// own context, but options it never sees must not be accepted.
func remoteChatUnsupported(req *ChatRequest) error {
	if err := remoteSamplingUnsupported(&req.Sampling); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	if req.Tools != nil && len(req.Tools.Tools) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, &gpu.SamplingError{Param: "tools", Detail: "not supported with a remote thinker stage"})
	}
	return nil
}

// toolFormat is the tool-call family of the engine's chat template.
func (p *Pipeline) toolFormat() toolFormat {
	if p.deps.Engine == nil {
		return toolFormatHermes
	}
	return toolFormatFor(p.deps.Engine.Info().ChatFormat)
}

// toolGrammar sets the grammar of a forced call (tool_choice required or a named function),
// bounded to the reply's room; the one token left is the end of generation.
func (p *Pipeline) toolGrammar(req *ChatRequest) error {
	if !req.Tools.Forces() {
		return nil
	}
	if req.Sampling.Grammar != "" {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, &gpu.SamplingError{Param: "tool_choice", Detail: "a forced tool call cannot be combined with response_format"})
	}
	only := ""
	if req.Tools.Choice == duplex.ToolChoiceFunction {
		only = req.Tools.Function
	}
	g, err := toolCallGrammar(p.toolFormat(), req.Tools.Tools, only, req.MaxTokens-1, true, false)
	if err != nil {
		param := "tools"
		if errors.Is(err, duplex.ErrToolBudget) {
			param = "max_tokens"
		}
		return fmt.Errorf("%w: %w", ErrInvalidRequest, &gpu.SamplingError{Param: param, Detail: err.Error()})
	}
	req.Sampling.Grammar = g
	return nil
}

// checkPromptFits refuses a prompt that leaves no room in the sequence's context window (as
// OpenAI does, instead of silently truncating it) and one that leaves less than an explicit
// MaxTokens; a defaulted MaxTokens shrinks to the room left.
func (p *Pipeline) checkPromptFits(prompt string, req *ChatRequest) error {
	limit := p.deps.Engine.Info().SeqContext
	n, over, err := p.deps.Engine.CountTokens(prompt, limit)
	if err != nil {
		return fmt.Errorf("counting prompt tokens: %w", err)
	}
	if over || n >= limit {
		return &ContextLengthError{PromptTokens: n, Limit: limit}
	}
	if n+req.MaxTokens > limit {
		if req.MaxTokensSet {
			return &ContextLengthError{PromptTokens: n, CompletionTokens: req.MaxTokens, Limit: limit}
		}
		req.MaxTokens = limit - n
		if req.Tools.Forces() {
			// Less room than the grammar was bounded for: bound it again.
			req.Sampling.Grammar = ""
			return p.toolGrammar(req)
		}
	}
	return nil
}

func validRole(role string) error {
	switch role {
	case "system", "developer", "user", "assistant", "tool":
		return nil
	}
	return fmt.Errorf("%w: role %q", ErrInvalidRequest, role)
}

// run is the request's stage-0 worker; it owns the sequence and waits for the talker.
func (r *Request) run() {
	p := r.p
	defer func() {
		r.stop()
		r.disp.close()
		<-r.disp.done // Done means the Sink calls are over too
		p.unregister(r)
		close(r.done)
	}()
	ts := r.ts
	resp := &response{rid: r.req.RequestID, ts: ts, disp: r.disp, wantAudio: r.req.WantAudio, submitTS: metrics.Now()}
	if err := p.thinker.acquire(ts.ctx); err != nil {
		if r.req.WantAudio {
			p.talker.unadmit()
		}
		return
	}
	defer p.thinker.release()
	resp.started = time.Now()
	if p.remote != nil {
		r.runRemote(resp)
		return
	}
	seq, err := r.prepare(resp)
	if err != nil {
		if r.req.WantAudio {
			p.talker.unadmit()
		}
		if ts.ctx.Err() != nil || ts.aborted.Load() {
			p.abortMetrics(resp, gpu.GenerateResult{}) // aborted while transcribing or prefilling
			return
		}
		p.fail(resp, 0, err)
		return
	}
	defer func() {
		r.mu.Lock()
		r.seq = nil
		r.mu.Unlock()
		seq.Close()
	}()
	if r.req.Tools.Parses() {
		resp.tools = newToolParser(p.toolFormat(), r.req.Tools.Parallel)
	}
	opts := gpu.GenerateOptions{MaxTokens: r.req.MaxTokens, Stop: r.req.Stop, Sampling: &r.req.Sampling}
	if _, _, err := p.generate(resp, seq, opts); err != nil {
		p.log.Debug("chat generation failed", zap.String("request_id", resp.rid), zap.Error(err))
	}
}

// runRemote is run with a remote thinker: the messages (audio parts transcribed) go upstream
// as one streamed chat completion. Abort cancels ts.ctx, which closes the upstream request.
func (r *Request) runRemote(resp *response) {
	p, ts := r.p, r.ts
	msgs, err := r.messages(resp)
	if err != nil {
		if r.req.WantAudio {
			p.talker.unadmit()
		}
		if ts.ctx.Err() != nil || ts.aborted.Load() {
			p.abortMetrics(resp, gpu.GenerateResult{})
			return
		}
		p.fail(resp, 0, err)
		return
	}
	g := remoteGen{t: p.remote, msgs: msgs, sampling: r.req.Sampling}
	opts := gpu.GenerateOptions{MaxTokens: r.req.MaxTokens, Stop: r.req.Stop, Sampling: &r.req.Sampling}
	if _, _, err := p.generate(resp, g, opts); err != nil {
		p.log.Debug("remote chat generation failed", zap.String("request_id", resp.rid), zap.Error(err))
	}
}

// messages transcribes audio parts and returns the conversation as text messages. The
// transcription is the request's input preprocessing (docs/STATS.md): its time goes to
// resp.preprocessMs, not to stage 0's generation time, and stage 0's submit time moves past it.
func (r *Request) messages(resp *response) ([]gpu.ChatMessage, error) {
	p, ctx := r.p, r.ts.ctx
	texts := make([]string, 0, len(r.req.Messages))
	for i, m := range r.req.Messages {
		text := m.Text
		if len(m.Audio) > 0 {
			start := time.Now()
			tr, err := p.asr.Transcribe(ctx, m.Audio)
			resp.preprocessMs += msSince(start)
			resp.submitTS = metrics.Now()
			if err != nil {
				return nil, fmt.Errorf("transcribing message %d: %w", i, err)
			}
			text = strings.TrimSpace(strings.TrimSpace(text) + " " + tr)
		}
		texts = append(texts, text)
	}
	return p.toolFormat().promptMessages(r.req.Tools, r.req.Messages, texts), nil
}

// prepare transcribes audio parts, renders the prompt and prefills it into a new sequence.
func (r *Request) prepare(resp *response) (*gpu.Sequence, error) {
	p, ctx := r.p, r.ts.ctx
	msgs, err := r.messages(resp)
	if err != nil {
		return nil, err
	}
	prompt, err := p.deps.Engine.ChatPrompt(msgs, true)
	if err != nil {
		return nil, fmt.Errorf("rendering chat prompt: %w", err)
	}
	if hasChatAudio(r.req.Messages) {
		if err := p.checkPromptFits(prompt, &r.req); err != nil {
			return nil, err
		}
	}
	seq, err := p.deps.Engine.Open(ctx, gpu.SeqOptions{Sampling: r.req.Sampling})
	if err != nil {
		return nil, fmt.Errorf("opening sequence: %w", err)
	}
	r.mu.Lock()
	r.seq = seq
	aborted := r.ts.aborted.Load()
	r.mu.Unlock()
	if aborted {
		seq.Close()
		return nil, fmt.Errorf("preparing chat: %w", context.Canceled)
	}
	st, err := seq.AppendText(ctx, prompt)
	if err != nil {
		seq.Close()
		return nil, fmt.Errorf("prefilling prompt: %w", err)
	}
	resp.prefill = st
	return seq, nil
}

// Abort stops the request in every stage at once: the generation is aborted, queued connector
// items are dropped, and no output reaches the Sink after it returns (one call in progress may
// finish). Each stage that did work still delivers its one StageMetricsMessage (FinishReason
// "abort" unless it had finished) before Done closes, so the request's work is accounted.
func (r *Request) Abort() {
	r.ts.abort(false)
	r.disp.stop()
	r.mu.Lock()
	seq := r.seq
	r.mu.Unlock()
	if seq != nil {
		seq.Abort(false)
	}
}

// Done is closed when every stage has finished with the request and its Sink calls are over.
func (r *Request) Done() <-chan struct{} { return r.done }

func (r *Request) closeForShutdown() {
	r.Abort()
	<-r.done
}

func hasChatAudio(msgs []ChatMessage) bool {
	for _, m := range msgs {
		if len(m.Audio) > 0 {
			return true
		}
	}
	return false
}

// remoteSamplingUnsupported refuses the sampling features the remote thinker does not forward
// upstream (it sends temperature, top_p, seed, max_tokens and stop).
func remoteSamplingUnsupported(s *gpu.Sampling) error {
	unsupported := func(param string) error {
		return &gpu.SamplingError{Param: param, Detail: "not supported with a remote thinker stage"}
	}
	switch {
	case s.Grammar != "":
		return unsupported("response_format")
	case s.Logprobs:
		return unsupported("logprobs")
	case len(s.LogitBias) > 0:
		return unsupported("logit_bias")
	case s.PresencePenalty != 0:
		return unsupported("presence_penalty")
	case s.FrequencyPenalty != 0:
		return unsupported("frequency_penalty")
	}
	return nil
}
