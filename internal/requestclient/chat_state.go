package requestclient

import (
	"errors"
	"sync"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/stage"
)

// chatState is the request state of one chat completion and its stage.Sink. The pipeline calls the
// sink methods serialized per request, but Close and the pump run on other goroutines, hence mu.
type chatState struct {
	c          *Client
	id         string
	wallStart  float64
	finalStage int                 // the stage whose Finished output ends the request
	numStages  int                 //
	agg        *metrics.Aggregator // the tables' aggregator: only with LogStats
	prom       *chatFigures        // what Prometheus observes: only with Collectors
	notify     chan struct{}       // cap 1: "the queue changed"

	mu            sync.Mutex
	reqStart      float64
	queue         []ChatEvent
	finished      bool // the last event (Done or Err) is queued
	reason        string
	err           error // the cause reported by an Error output
	promptTokens  int
	outputTokens  int
	firstOutputTS []float64 // per stage, wall seconds; for serving_time_to_first_output_ms
	reported      bool
}

func newChatState(c *Client, req stage.ChatRequest, wallStart float64, n int) *chatState {
	final := 0
	if req.WantAudio && n > 1 {
		final = n - 1
	}
	st := &chatState{c: c, id: req.RequestID, wallStart: wallStart, finalStage: final, numStages: n,
		notify: make(chan struct{}, 1), firstOutputTS: make([]float64, n)}
	// The aggregator renders the tables, so only --log-stats builds it. Prometheus (on by
	// default) gets its figures from chatFigures: a few counters and the stage rows it reads,
	// observed directly, with no per-request maps or tables.
	if c.opts.LogStats {
		st.agg = metrics.NewAggregator(n, true, wallStart, final, metrics.WithClock(c.clock),
			metrics.WithStructuredRecords(c.opts.StructuredStats))
		c.chatAggregators.Add(1)
	}
	if c.opts.Collectors != nil {
		st.prom = &chatFigures{}
	}
	return st
}

func (st *chatState) setReqStart(ts float64) {
	st.mu.Lock()
	if !st.finished {
		st.reqStart = ts
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
	if m.StageID >= 0 && m.StageID < len(st.firstOutputTS) && st.firstOutputTS[m.StageID] == 0 &&
		(m.Kind == stage.Text || m.Kind == stage.Audio) {
		st.firstOutputTS[m.StageID] = now
	}
	switch m.Kind {
	case stage.Text:
		if m.Text != "" || len(m.Logprobs) > 0 {
			st.pushLocked(ChatEvent{Text: m.Text, Logprobs: m.Logprobs})
		}
	case stage.ToolCalled:
		if c := m.ToolCall; c != nil {
			tc := ToolCall(*c)
			st.pushLocked(ChatEvent{ToolCall: &tc})
		}
	case stage.Audio:
		// The chunk's Text is the phrase it speaks; the client already has it from stage 0.
		if len(m.Audio) > 0 {
			st.pushLocked(ChatEvent{Audio: m.Audio, SampleRate: m.SampleRate})
		}
	case stage.Error:
		// A Finished with reason error follows and carries the last metrics; keep the cause.
		if m.Err != nil {
			st.err = m.Err
		} else {
			st.err = errors.New("the pipeline reported an error")
		}
	}
	if m.Kind == stage.Finished || m.Finished {
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
		reason = stage.FinishStop
	}
	err := st.err
	if reason == stage.FinishError && err == nil {
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
	if st.reported {
		return
	}
	st.prom.addStage(stageID, m)
	if st.agg == nil {
		return
	}
	// A real duration from arrival, not an epoch stamp (vllm-omni put one there on duplex
	// snapshots and had to hide the row).
	if stageID >= 0 && stageID < len(st.firstOutputTS) && st.firstOutputTS[stageID] > 0 {
		m.ServingTimeToFirstOutputMs = (st.firstOutputTS[stageID] - st.wallStart) * 1000
	}
	st.agg.MarkStageTimes(stageID, submitTS)
	st.agg.OnStageMetrics(stageID, st.id, m.Clone(), finalType)
}

// OnTransfer implements stage.Sink: connector TX for the request's edge.
func (st *chatState) OnTransfer(t stage.TransferEvent) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.reported {
		return
	}
	st.prom.addSend(t.From, t.To, t.SizeBytes, t.TxMs)
	if st.agg != nil {
		st.agg.OnForward(t.From, t.To, st.id, t.SizeBytes, t.TxMs, t.UsedShm)
	}
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
	if st.prom != nil {
		st.prom.e2eMs = (st.c.clock() - st.reqStart) * 1000
	}
	if st.agg != nil {
		if reason == "abort" || reason == "error" {
			// Chat tables keep vllm-omni's format; only a cut-short request names its reason.
			st.agg.SetTimingIdentity(&metrics.TimingIdentity{Req: st.id, Turn: -1, Reason: reason})
		}
		st.agg.OnFinalizeRequest(st.finalStage, st.id, st.reqStart)
	}
	if err != nil {
		st.pushLocked(ChatEvent{Err: err})
		return
	}
	st.pushLocked(ChatEvent{Done: true, FinishReason: reason, PromptTokens: st.promptTokens, CompletionTokens: st.outputTokens})
}

// report prints the tables (when LogStats), records Prometheus and drops the request state, once.
// It runs on the stream's own goroutines, never on a stage worker.
func (st *chatState) report() {
	st.mu.Lock()
	if st.reported || !st.finished {
		st.mu.Unlock()
		return
	}
	st.reported = true
	reason := st.reason
	st.mu.Unlock()
	if st.agg != nil {
		st.agg.BuildAndLogSummary(st.c.log)
	}
	st.recordPrometheus(reason)
	st.c.unregister(st.id)
	st.c.log.Debug("chat request done", zap.String("request_id", st.id), zap.String("reason", reason))
}

func (st *chatState) recordPrometheus(reason string) {
	if st.c.opts.Collectors == nil || st.prom == nil {
		return
	}
	st.mu.Lock()
	r := st.prom.record(reason)
	if r.E2E.RequestID == "" {
		r.E2E.RequestID = st.id // the tables' request_id: traces name their record by it
	}
	for stageID, ts := range st.firstOutputTS {
		if stageID > 0 && ts > 0 { // stage 0 writes text; the later stages speak
			r.AudioTTFPSeconds, r.AudioTTFPStage = ts-st.wallStart, stageID
			break
		}
	}
	st.mu.Unlock()
	if f := st.c.opts.OnFinalized; f != nil {
		r.TraceID = f(r)
	}
	st.c.opts.Collectors.ObserveFinalized(r)
}
