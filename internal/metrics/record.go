package metrics

import (
	"slices"

	"go.uber.org/zap"
)

// tableInputs are what the --log-stats tables show beside a record's rows, e2e and edges: the
// Overall Summary's wall times and the identity in titles and the [OmniTiming] line. Only the
// renderer (summary.go) reads them, so they are not part of the record's exported fields.
type tableInputs struct {
	wallStart, wallEnd float64     // e2e_wall_time_ms runs from the turn's t0 to its end
	stageSpans         []stageSpan // index = stage id: e2e_stage_<i>_wall_time_ms
	// identity names a duplex turn, or a chat request cut short; nil prints vllm-omni's plain
	// request_id=<E2E.RequestID>.
	identity *timingIdentity
}

// stageSpan is a stage's first and last wall time within a turn (vllm-omni's stage_first_ts and
// stage_last_ts); its wall time counts only when both are set.
type stageSpan struct {
	first, last       float64
	hasFirst, hasLast bool
}

// markStageLocked stamps a stage on receipt of a snapshot (vllm-omni's record_stage_times): its
// first time prefers the engine's submit time (submitTS > 0) over now; its last time is now.
func (t *TurnMetrics) markStageLocked(stage int, submitTS, now float64) {
	if stage < 0 || stage >= len(t.spans) {
		return
	}
	sp := &t.spans[stage]
	if !sp.hasFirst {
		sp.first, sp.hasFirst = now, true
		if submitTS > 0 {
			sp.first = submitTS
		}
	}
	sp.last = max(sp.last, now)
	sp.hasLast = true
}

// clampSpansLocked caps every stage's last time at end (and its first, so a wall time is never
// negative).
func (t *TurnMetrics) clampSpansLocked(end float64) {
	for i := range t.spans {
		sp := &t.spans[i]
		if sp.hasLast && sp.last > end {
			sp.last = end
		}
		if sp.hasFirst && sp.first > end {
			sp.first = end
		}
	}
}

// StageTimes returns a stage's first and last wall times in the turn; ok is false until both are
// set.
func (t *TurnMetrics) StageTimes(stage int) (first, last float64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if stage < 0 || stage >= len(t.spans) {
		return 0, 0, false
	}
	sp := t.spans[stage]
	return sp.first, sp.last, sp.hasFirst && sp.hasLast
}

// edgeLocked is the turn's (from → to) edge, added on first use.
func (t *TurnMetrics) edgeLocked(from, to int) *TransferEdgeStats {
	for i := range t.edges {
		if t.edges[i].FromStage == from && t.edges[i].ToStage == to {
			return &t.edges[i]
		}
	}
	t.edges = append(t.edges, TransferEdgeStats{FromStage: from, ToStage: to})
	return &t.edges[len(t.edges)-1]
}

// recordRXLocked is vllm-omni's record_transfer_rx: the RX figures of a stage > 0 snapshot belong
// to the edge that fed the stage; its size is the first one known.
func (t *TurnMetrics) recordRXLocked(stage int, m StageRequestStats) {
	if stage <= 0 {
		return
	}
	e := t.edgeLocked(stage-1, stage)
	if e.SizeBytes == 0 {
		e.SizeBytes = int64(m.RxTransferBytes)
	}
	e.RxDecodeTimeMs += m.RxDecodeTimeMs
	e.InFlightTimeMs += m.RxInFlightTimeMs
}

// transfersLocked is a copy of the turn's edges named rid, in first-use order; nil for none.
func (t *TurnMetrics) transfersLocked(rid string) []TransferEdgeStats {
	if len(t.edges) == 0 {
		return nil
	}
	out := slices.Clone(t.edges)
	for i := range out {
		out[i].RequestID = rid
	}
	return out
}

// closeE2ELocked is vllm-omni's on_finalize_request: the e2e record of rid runs from reqStart
// to end, its tokens are those of rows so far (stage 0's input and every stage's output), its
// transfer totals those of the edges so far; end closes the final stage's span and the wall time.
func (t *TurnMetrics) closeE2ELocked(finalStage int, rid string, rows []StageRequestStats, reqStart, end float64) RequestE2EStats {
	if finalStage >= 0 && finalStage < len(t.spans) {
		sp := &t.spans[finalStage]
		sp.last = max(sp.last, end)
		sp.hasLast = true
	}
	t.wallEnd = max(t.wallEnd, end)
	e := RequestE2EStats{RequestID: rid, E2ETotalMs: (end - reqStart) * 1000}
	for _, r := range rows {
		if r.StageID == 0 {
			e.E2ETotalTokens += int64(r.NumTokensIn)
		}
		e.E2ETotalTokens += int64(r.NumTokensOut)
	}
	for _, edge := range t.edges {
		e.TransfersTotalTimeMs += edge.totalTimeMs()
		e.TransfersTotalBytes += edge.SizeBytes
	}
	return e
}

// tableInputsLocked is what the record's tables need beside its rows (a copy: the record is
// immutable).
func (t *TurnMetrics) tableInputsLocked(id *timingIdentity) tableInputs {
	return tableInputs{wallStart: t.arrival, wallEnd: t.wallEnd, stageSpans: slices.Clone(t.spans), identity: id}
}

// logTables renders the finalized turn's record and logs it (log nil: render only), keeping the
// summary for tests.
func (t *TurnMetrics) logTables(log *zap.Logger) {
	t.mu.Lock()
	rec, structured := t.record, t.structured
	t.mu.Unlock()
	s := rec.tableSummary()
	t.mu.Lock()
	t.summary = s
	t.mu.Unlock()
	logSummary(log, s, rec.tables.identity, structured)
}
