package metrics

import (
	"slices"

	"go.uber.org/zap"
)

// requestTurn is what a chat completion's turn (NewRequestTurn) keeps beside the duplex fields:
// its rows are kept snapshot by snapshot, as vllm-omni's chat tables print them, and its e2e ends
// when the request ends (End), not when it is reported.
type requestTurn struct {
	finalStage int     // the stage whose Finished output ends the request
	reqStart   float64 // vllm-omni's req_start: e2e_total_ms runs from here
	tables     bool    // --log-stats: Finalize logs the record's tables
	ended      bool
	rawReason  string              // the reason as the request ended ("abort", not "cancelled"): the record's
	rows       []StageRequestStats // one per snapshot, in arrival order
	e2e        RequestE2EStats     // closed by End
}

// NewRequestTurn opens the turn of one chat completion when it is accepted: the same record
// type, owner and close-once as a duplex turn, so the tables, the structured record, Prometheus
// and tracing read one FinalizedRequest. requestID keys it from the start (a chat request has no
// later response to attach), finalStage is the stage whose Finished output ends it. tables makes
// Finalize log the record's --log-stats tables (structured: as records).
func NewRequestTurn(requestID string, arrival float64, numStages, finalStage int, tables, structured bool, clock Clock) *TurnMetrics {
	t := newTurnMetrics(requestID, requestID, -1, arrival, numStages, clock)
	t.req = &requestTurn{finalStage: finalStage, reqStart: t.arrival, tables: tables}
	t.structured = structured
	return t
}

// HasTables reports whether Finalize logs the turn's --log-stats tables: a chat request's when
// it was opened with them; a duplex turn's when Finalize is asked to.
func (t *TurnMetrics) HasTables() bool { return t != nil && (t.req == nil || t.req.tables) }

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
// record, with serving_time_to_first_output_ms the real duration from arrival when the stage's
// first output came before its snapshot.
func (t *TurnMetrics) accumulateRequestLocked(stage int, m StageRequestStats, finalOutputType string, submitTS float64) {
	t.segments++
	if stage < len(t.stages) && t.stages[stage].firstOutput > 0 {
		m.ServingTimeToFirstOutputMs = (t.stages[stage].firstOutput - t.arrival) * 1000
	}
	t.markStageLocked(stage, submitTS, t.clock())
	m = m.clone()
	m.StageID, m.RequestID = stage, t.requestID
	if finalOutputType != "" {
		m.FinalOutputType = finalOutputType
	}
	t.req.rows = append(t.req.rows, m)
	t.recordRXLocked(stage, m)
}

// addRequestSendLocked is AddTransfer for a chat request: vllm-omni's on_forward, which also
// starts the receiving stage's wall time when nothing did.
func (t *TurnMetrics) addRequestSendLocked(from, to int, sizeBytes int64, txMs float64, usedShm bool) {
	now := t.clock()
	if to >= 0 && to < len(t.spans) && !t.spans[to].hasFirst {
		t.spans[to].first, t.spans[to].hasFirst = now, true
	}
	e := t.edgeLocked(from, to)
	e.SizeBytes += sizeBytes
	e.TxTimeMs += txMs
	e.UsedShm = e.UsedShm || usedShm
}

// End closes a chat request's generation once with its reason: e2e_total_ms ends now. It is the
// owner's close; rows that arrive later (a stage's partial snapshot after an abort) still join
// the record's rows until Finalize reports the turn. It returns false when the request already
// ended.
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
	t.req.e2e = t.closeE2ELocked(t.req.finalStage, t.requestID, t.req.rows, t.req.reqStart, t.clock())
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
	var id *timingIdentity
	if raw == ReasonAbort || raw == ReasonError {
		// Chat tables keep vllm-omni's format; only a cut-short request names its reason.
		id = &timingIdentity{Req: t.requestID, Turn: -1, Reason: raw}
	}
	rec := FinalizedRequest{
		FinishedReason: raw,
		E2E:            t.req.e2e,
		Stages:         slices.Clone(t.req.rows),
		Transfers:      t.transfersLocked(t.requestID),
		tables:         t.tableInputsLocked(id),
	}
	// Stage 0 writes text; the first later stage with output speaks.
	for stage := 1; stage < len(t.stages); stage++ {
		if ts := t.stages[stage].firstOutput; ts > 0 {
			rec.AudioTTFPSeconds, rec.AudioTTFPStage = ts-t.arrival, stage
			break
		}
	}
	t.record = rec
	tables := t.req.tables
	t.mu.Unlock()
	if tables {
		t.printTables(log)
	}
	return true
}
