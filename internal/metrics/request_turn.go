package metrics

import (
	"slices"

	"go.uber.org/zap"
)

// requestTurn is what a chat completion's turn (NewRequestTurn) keeps beside the duplex fields:
// its rows go to the aggregator snapshot by snapshot, as vllm-omni's chat tables print them, and
// its e2e ends when the request ends (End), not when it is reported.
type requestTurn struct {
	finalStage int     // the stage whose Finished output ends the request
	reqStart   float64 // vllm-omni's req_start: e2e_total_ms runs from here
	ended      bool
	rawReason  string   // the reason as the request ended ("abort", not "cancelled"): the record's
	figures    *figures // what Prometheus observes when no aggregator renders tables
}

// NewRequestTurn opens the turn of one chat completion when it is accepted: the same record
// type, owner and close-once as a duplex turn, so the tables, the structured record, Prometheus
// and tracing read one FinalizedRequest. requestID keys it from the start (a chat request has no
// later response to attach), finalStage is the stage whose Finished output ends it. tables builds
// the aggregator that renders --log-stats (structured: as records); without it the turn keeps
// only the few figures Prometheus reads, with no per-request maps or tables.
func NewRequestTurn(requestID string, arrival float64, numStages, finalStage int, tables, structured bool, clock Clock) *TurnMetrics {
	t := newTurnMetrics(requestID, requestID, -1, arrival, numStages, clock)
	t.req = &requestTurn{finalStage: finalStage, reqStart: t.arrival}
	if tables {
		t.agg = newAggregator(t.numStages, true, t.arrival, finalStage, withClock(t.clock), withStructuredRecords(structured))
	} else {
		t.req.figures = &figures{}
	}
	return t
}

// HasTables reports whether the turn renders --log-stats tables (it owns an aggregator).
func (t *TurnMetrics) HasTables() bool { return t != nil && t.agg != nil }

// SetRequestStart moves a chat request's e2e start (vllm-omni's req_start: right after the
// submit returns); ignored once the request ended.
func (t *TurnMetrics) SetRequestStart(ts float64) {
	t.whileOpen(func() {
		if t.req != nil && !t.req.ended {
			t.req.reqStart = ts
		}
	})
}

// accumulateRequestLocked is Accumulate for a chat request: the snapshot is one row of the
// tables, with serving_time_to_first_output_ms the real duration from arrival when the stage's
// first output came before its snapshot.
func (t *TurnMetrics) accumulateRequestLocked(stage int, m StageRequestStats, finalOutputType string, submitTS float64) {
	t.segments++
	t.req.figures.addStage(stage, m)
	if t.agg == nil {
		return
	}
	if stage < len(t.stages) && t.stages[stage].firstOutput > 0 {
		m.ServingTimeToFirstOutputMs = (t.stages[stage].firstOutput - t.arrival) * 1000
	}
	t.agg.markStageTimes(stage, submitTS)
	t.agg.onStageMetrics(stage, t.requestID, m.clone(), finalOutputType)
}

// addRequestSendLocked is AddTransfer for a chat request: vllm-omni's on_forward.
func (t *TurnMetrics) addRequestSendLocked(from, to int, sizeBytes int64, txMs float64, usedShm bool) {
	t.req.figures.addSend(from, to, sizeBytes, txMs)
	if t.agg != nil {
		t.agg.onForward(from, to, t.requestID, sizeBytes, txMs, usedShm)
	}
}

// End closes a chat request's generation once with its reason: e2e_total_ms ends now. It is the
// owner's close; rows that arrive later (a stage's partial snapshot after an abort) still join
// the tables until Finalize reports the turn. It returns false when the request already ended.
func (t *TurnMetrics) End(reason string) bool {
	if t == nil || t.req == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.req.ended || t.finalized {
		return false
	}
	t.req.ended, t.req.rawReason = true, reason
	t.req.figures.setE2E((t.clock() - t.req.reqStart) * 1000)
	if t.agg != nil {
		if reason == ReasonAbort || reason == ReasonError {
			// Chat tables keep vllm-omni's format; only a cut-short request names its reason.
			t.agg.setTimingIdentity(&timingIdentity{Req: t.requestID, Turn: -1, Reason: reason})
		}
		t.agg.onFinalizeRequest(t.req.finalStage, t.requestID, t.req.reqStart)
	}
	return true
}

// finalizeRequest is Finalize for a chat request: End (when the owner did not), one record, and
// the tables when the turn has them.
func (t *TurnMetrics) finalizeRequest(reason string, log *zap.Logger) bool {
	t.End(reason)
	t.mu.Lock()
	if t.finalized {
		t.mu.Unlock()
		return false
	}
	t.finalized = true
	raw := t.req.rawReason
	t.reason = NormalizeFinishedReason(raw)
	var rec FinalizedRequest
	if t.agg != nil {
		rec, _ = t.agg.FinalizedRequest(t.requestID, raw)
	} else {
		rec = t.req.figures.record(raw)
	}
	// The tables' request_id: traces name their record by it.
	rec.E2E.RequestID = t.requestID
	// Stage 0 writes text; the first later stage with output speaks.
	for stage := 1; stage < len(t.stages); stage++ {
		if ts := t.stages[stage].firstOutput; ts > 0 {
			rec.AudioTTFPSeconds, rec.AudioTTFPStage = ts-t.arrival, stage
			break
		}
	}
	t.record = rec
	t.mu.Unlock()
	if t.agg != nil {
		s := t.agg.buildAndLogSummary(log)
		t.mu.Lock()
		t.summary = s
		t.mu.Unlock()
	}
	return true
}

// figures is what Prometheus observes for a chat request without tables, taken directly from
// the stage snapshots and connector sends: the stage rows (only the fields
// Collectors.ObserveFinalized reads), one row per edge and the e2e time. The values are those
// the aggregator's FinalizedRequest gives (TestChatPrometheusWithoutLogStatsBuildsNoAggregator),
// without its maps and tables. Guarded by the turn's mu; a nil *figures records nothing.
type figures struct {
	stages []StageRequestStats
	edges  []TransferEdgeStats
	e2eMs  float64
}

func (f *figures) addStage(stageID int, m StageRequestStats) {
	if f == nil {
		return
	}
	f.stages = append(f.stages, StageRequestStats{
		StageID: stageID, NumTokensIn: m.NumTokensIn, NumTokensOut: m.NumTokensOut,
		StageGenTimeMs: m.StageGenTimeMs, VllmTtftMs: m.VllmTtftMs, VllmItlsMs: slices.Clone(m.VllmItlsMs),
		AudioGeneratedFrames: m.AudioGeneratedFrames, AudioSampleRate: m.AudioSampleRate, AudioDurationS: m.AudioDurationS,
	})
	if stageID > 0 { // the RX side of the edge that fed the stage, as the aggregator records it
		e := f.edge(stageID-1, stageID)
		if e.SizeBytes == 0 {
			e.SizeBytes = int64(m.RxTransferBytes)
		}
		e.RxDecodeTimeMs += m.RxDecodeTimeMs
		e.InFlightTimeMs += m.RxInFlightTimeMs
	}
}

func (f *figures) addSend(from, to int, sizeBytes int64, txMs float64) {
	if f == nil {
		return
	}
	e := f.edge(from, to)
	e.SizeBytes += sizeBytes
	e.TxTimeMs += txMs
}

func (f *figures) setE2E(ms float64) {
	if f != nil {
		f.e2eMs = ms
	}
}

func (f *figures) edge(from, to int) *TransferEdgeStats {
	for i := range f.edges {
		if f.edges[i].FromStage == from && f.edges[i].ToStage == to {
			return &f.edges[i]
		}
	}
	f.edges = append(f.edges, TransferEdgeStats{FromStage: from, ToStage: to})
	return &f.edges[len(f.edges)-1]
}

func (f *figures) record(reason string) FinalizedRequest {
	return FinalizedRequest{
		FinishedReason: reason,
		E2E:            RequestE2EStats{E2ETotalMs: f.e2eMs},
		Stages:         f.stages,
		Transfers:      f.edges,
	}
}
