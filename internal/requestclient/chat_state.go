package requestclient

import (
	"errors"
	"sync"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/stage"
)

// chatState is the request state of one chat completion and its stage.Sink. The pipeline calls the
// sink methods serialized per request, but Close and the pump run on other goroutines, hence mu.
type chatState struct {
	c      *Client
	id     string
	turn   *metrics.TurnMetrics // the request's one turn: nil with neither LogStats nor Collectors
	notify chan struct{}        // cap 1: "the queue changed"

	mu           sync.Mutex
	queue        []ChatEvent
	finished     bool // the last event (Done or Err) is queued
	reason       string
	err          error // the cause reported by an Error output
	promptTokens int
	outputTokens int
	reported     bool
}

func newChatState(c *Client, req stage.ChatRequest, wallStart float64, n int) *chatState {
	final := 0
	if req.WantAudio && n > 1 {
		final = n - 1
	}
	st := &chatState{c: c, id: req.RequestID, notify: make(chan struct{}, 1)}
	// The request is one turn, as a duplex response is: born here, fed by the sink, ended once
	// with its reason and reported once; its record is what Prometheus observes, and only
	// --log-stats also logs it as tables.
	if c.opts.LogStats || c.opts.Collectors != nil {
		st.turn = metrics.NewRequestTurn(req.RequestID, wallStart, n, final, c.opts.LogStats,
			c.opts.StructuredStats, c.clock)
	}
	return st
}

func (st *chatState) setReqStart(ts float64) {
	st.mu.Lock()
	if !st.finished {
		st.turn.SetRequestStart(ts)
	}
	st.mu.Unlock()
}

func (st *chatState) isFinished() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.finished
}

// push queues an event and wakes the pump; it never blocks.
func (st *chatState) pushLocked(ev ChatEvent) {
	st.queue = append(st.queue, ev)
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

// take hands the queued events to the pump; last reports that the final event is among them.
func (st *chatState) take() (batch []ChatEvent, last bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	batch, st.queue = st.queue, nil
	return batch, st.finished
}

// OnOutput implements stage.Sink.
func (st *chatState) OnOutput(m stage.OutputMessage) {
	now := st.c.clock()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.finished {
		return // late output of an aborted or failed request
	}
	if m.Kind == duplex.OutText || m.Kind == duplex.OutAudio {
		st.turn.MarkFirstOutput(m.StageID, now, m.Kind == duplex.OutAudio)
	}
	switch m.Kind {
	case duplex.OutText:
		if m.Text != "" || len(m.Logprobs) > 0 {
			st.pushLocked(ChatEvent{Text: m.Text, Logprobs: m.Logprobs})
		}
	case duplex.OutToolCall:
		if c := m.ToolCall; c != nil {
			tc := *c
			st.pushLocked(ChatEvent{ToolCall: &tc})
		}
	case duplex.OutAudio:
		// The chunk's Text is the phrase it speaks; the client already has it from stage 0.
		if len(m.Audio) > 0 {
			st.pushLocked(ChatEvent{Audio: m.Audio, SampleRate: m.SampleRate})
		}
	case duplex.OutError:
		// A Finished with reason error follows and carries the last metrics; keep the cause.
		if m.Err != nil {
			st.err = m.Err
		} else {
			st.err = errors.New("the pipeline reported an error")
		}
	}
	if m.Kind == duplex.OutFinished || m.Finished {
		st.onFinishedLocked(m)
	}
}

// onFinishedLocked handles the end of the request, which comes from the final stage.
func (st *chatState) onFinishedLocked(m stage.OutputMessage) {
	if m.Metrics != nil {
		st.ingestLocked(m.StageID, *m.Metrics, m.StageSubmitTS, "")
	}
	reason := m.FinishReason
	if reason == "" {
		reason = duplex.FinishStop
	}
	err := st.err
	if reason == duplex.FinishError && err == nil {
		err = m.Err
		if err == nil {
			err = errors.New("the pipeline ended the request with an error")
		}
	}
	st.finishLocked(reason, err)
}

// OnStageMetrics implements stage.Sink.
func (st *chatState) OnStageMetrics(m stage.StageMetricsMessage) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ingestLocked(m.StageID, m.Metrics, m.StageSubmitTS, m.FinalOutputType)
}

func (st *chatState) ingestLocked(stageID int, m metrics.StageRequestStats, submitTS float64, finalType string) {
	if stageID == 0 {
		st.promptTokens += m.NumTokensIn
		st.outputTokens += m.NumTokensOut
	}
	st.turn.Accumulate(stageID, m, finalType, submitTS)
}

// OnTransfer implements stage.Sink: connector TX for the request's edge.
func (st *chatState) OnTransfer(t stage.TransferEvent) {
	st.turn.AddTransfer(t.From, t.To, t.SizeBytes, t.TxMs, t.BlockedMs, t.UsedShm)
}

// finish ends the request from outside the sink (Close, a pipeline that gave up).
func (st *chatState) finish(reason string, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.finishLocked(reason, err)
}

// finishLocked queues the last event and stamps the e2e end, once.
func (st *chatState) finishLocked(reason string, err error) {
	if st.finished {
		return
	}
	st.finished = true
	st.reason = reason
	st.turn.End(reason)
	if err != nil {
		st.pushLocked(ChatEvent{Err: err})
		return
	}
	st.pushLocked(ChatEvent{Done: true, FinishReason: reason, PromptTokens: st.promptTokens, CompletionTokens: st.outputTokens})
}

// report makes the request's one record, once: the tables (when LogStats), the structured
// record, Prometheus and the trace, as a duplex turn's finish does; then it drops the request
// state. It runs on the stream's own goroutines, never on a stage worker.
func (st *chatState) report() {
	st.mu.Lock()
	if st.reported || !st.finished {
		st.mu.Unlock()
		return
	}
	st.reported = true
	reason := st.reason
	st.mu.Unlock()
	publishTurn(st.turn, reason, st.c.log, st.c.opts.Collectors, st.c.opts.OnFinalized)
	st.c.unregister(st.id)
	st.c.log.Debug("chat request done", zap.String("request_id", st.id), zap.String("reason", reason))
}
