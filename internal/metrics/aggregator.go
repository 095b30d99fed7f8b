package metrics

import (
	"slices"
	"sync"
)

// aggregatorOption configures an Aggregator.
type aggregatorOption func(*Aggregator)

// withClock replaces the wall clock (tests use a fake one).
func withClock(c Clock) aggregatorOption {
	return func(a *Aggregator) {
		if c != nil {
			a.clock = c
		}
	}
}

// withFinalStages sets a per-request final stage id (vllm-omni's `{rid: int}` form of
// final_stage_id_for_e2e); requests not in the map use the constructor's finalStage.
func withFinalStages(m map[string]int) aggregatorOption {
	return func(a *Aggregator) { a.finalStages = m }
}

// withStructuredRecords makes buildAndLogSummary log each table as one structured record (its
// fields are the table's fields, with the request / response / turn / reason ids) instead of an
// ASCII table in the message: for --log-format json, so a log pipeline needs no regex.
func withStructuredRecords(on bool) aggregatorOption {
	return func(a *Aggregator) { a.structured = on }
}

type edgeKey struct {
	from, to int
	rid      string
}

// Aggregator is vllm-omni's OrchestratorAggregator: it collects stage snapshots,
// connector transfers and end-to-end records for one or more requests and renders the
// --log-stats tables. Its methods are safe for concurrent use.
type Aggregator struct {
	mu          sync.Mutex
	numStages   int
	logStats    bool
	wallStart   float64
	finalStage  int
	finalStages map[string]int
	clock       Clock
	identity    *timingIdentity
	structured  bool

	stageFirst  []float64
	stageLast   []float64
	hasFirst    []bool
	hasLast     []bool
	stageTokens []int64
	lastFinish  float64

	e2eTotalMs     float64
	e2eTotalTokens int64
	e2eCount       int
	e2eDone        map[string]struct{}
	e2eEvents      []RequestE2EStats

	stageEvents   map[string][]StageRequestStats
	transfers     map[edgeKey]*TransferEdgeStats
	transferOrder []edgeKey                  // insertion order, for the [OmniTiming] transfers list
	toolCalls     map[string][]ToolCallStats // a turn's tool and MCP calls (toolcalls.go); nil = none
}

// newAggregator makes an aggregator for numStages stages. wallStart (unix seconds) anchors the
// overall wall time; finalStage is the stage whose finish ends a request.
func newAggregator(numStages int, logStats bool, wallStart float64, finalStage int, opts ...aggregatorOption) *Aggregator {
	numStages = max(numStages, 1)
	a := &Aggregator{
		numStages:   numStages,
		logStats:    logStats,
		wallStart:   wallStart,
		finalStage:  finalStage,
		clock:       Now,
		stageFirst:  make([]float64, numStages),
		stageLast:   make([]float64, numStages),
		hasFirst:    make([]bool, numStages),
		hasLast:     make([]bool, numStages),
		stageTokens: make([]int64, numStages),
		lastFinish:  wallStart,
		e2eDone:     map[string]struct{}{},
		stageEvents: map[string][]StageRequestStats{},
		transfers:   map[edgeKey]*TransferEdgeStats{},
	}
	for _, o := range opts {
		o(a)
	}
	return a
}

// finalStageOf is the final stage of rid.
func (a *Aggregator) finalStageOf(rid string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.finalStageLocked(rid)
}

func (a *Aggregator) finalStageLocked(rid string) int {
	if s, ok := a.finalStages[rid]; ok {
		return s
	}
	return a.finalStage
}

// setTimingIdentity makes titles and the [OmniTiming] line carry a duplex turn identity.
func (a *Aggregator) setTimingIdentity(id *timingIdentity) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if id == nil {
		a.identity = nil
		return
	}
	c := *id
	a.identity = &c
}

// onStageMetrics records one stage snapshot for rid. The aggregator keeps m; pass a
// Clone if the caller mutates it later. For stage > 0 the snapshot's RX figures are added to the
// edge (stage-1 → stage).
func (a *Aggregator) onStageMetrics(stage int, rid string, m StageRequestStats, finalOutputType string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.addStageEventLocked(stage, rid, m, finalOutputType)
	a.recordRXLocked(stage, rid, m)
}

func (a *Aggregator) addStageEventLocked(stage int, rid string, m StageRequestStats, finalOutputType string) {
	m.StageID = stage
	m.RequestID = rid
	if finalOutputType != "" {
		m.FinalOutputType = finalOutputType
	}
	if stage >= 0 && stage < a.numStages {
		a.stageTokens[stage] += int64(m.NumTokensOut)
		if stage == 0 {
			a.stageTokens[stage] += int64(m.NumTokensIn)
		}
	}
	a.stageEvents[rid] = append(a.stageEvents[rid], m)
}

// recordRXLocked is vllm-omni's record_transfer_rx: RX figures of a stage>0 snapshot belong to
// the edge that fed it.
func (a *Aggregator) recordRXLocked(stage int, rid string, m StageRequestStats) {
	if stage <= 0 {
		return
	}
	e := a.edgeLocked(stage-1, stage, rid)
	if e.SizeBytes == 0 {
		e.SizeBytes = int64(m.RxTransferBytes)
	}
	e.RxDecodeTimeMs += m.RxDecodeTimeMs
	e.InFlightTimeMs += m.RxInFlightTimeMs
}

// renameRequest moves the transfer edges recorded under request id from to id to (a duplex turn's
// edges recorded before its response id was known).
func (a *Aggregator) renameRequest(from, to string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, k := range a.transferOrder {
		if k.rid != from {
			continue
		}
		e := a.transfers[k]
		delete(a.transfers, k)
		k.rid = to
		e.RequestID = to
		a.transfers[k] = e
		a.transferOrder[i] = k
	}
}

func (a *Aggregator) edgeLocked(from, to int, rid string) *TransferEdgeStats {
	k := edgeKey{from, to, rid}
	e, ok := a.transfers[k]
	if !ok {
		e = &TransferEdgeStats{FromStage: from, ToStage: to, RequestID: rid}
		a.transfers[k] = e
		a.transferOrder = append(a.transferOrder, k)
	}
	return e
}

// onForward records connector TX: the receiving stage's first timestamp is set if
// unset, and size and time add up on the (from, to, rid) edge.
func (a *Aggregator) onForward(from, to int, rid string, sizeBytes int64, txMs float64, usedShm bool) {
	now := a.clock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if to >= 0 && to < a.numStages && !a.hasFirst[to] {
		a.stageFirst[to], a.hasFirst[to] = now, true
	}
	e := a.edgeLocked(from, to, rid)
	e.SizeBytes += sizeBytes
	e.TxTimeMs += txMs
	e.UsedShm = e.UsedShm || usedShm
}

// markStageTimes stamps a stage on receipt of a snapshot: its first timestamp prefers the
// engine's submit time (submitTS > 0) and falls back to now; its last timestamp is now.
func (a *Aggregator) markStageTimes(stage int, submitTS float64) {
	now := a.clock()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.markStageTimesLocked(stage, submitTS, now)
}

func (a *Aggregator) markStageTimesLocked(stage int, submitTS, now float64) {
	if stage < 0 || stage >= a.numStages {
		return
	}
	if !a.hasFirst[stage] {
		a.stageFirst[stage], a.hasFirst[stage] = now, true
		if submitTS > 0 {
			a.stageFirst[stage] = submitTS
		}
	}
	a.stageLast[stage] = max(a.stageLast[stage], now)
	a.hasLast[stage] = true
}

// StageTimes returns a stage's first and last timestamps; ok is false until both are set.
func (a *Aggregator) StageTimes(stage int) (first, last float64, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if stage < 0 || stage >= a.numStages {
		return 0, 0, false
	}
	return a.stageFirst[stage], a.stageLast[stage], a.hasFirst[stage] && a.hasLast[stage]
}

// onFinalizeRequest closes rid at the final stage: e2e_total_ms runs from reqStart
// to now. A second call for the same rid is a no-op.
func (a *Aggregator) onFinalizeRequest(stage int, rid string, reqStart float64) {
	now := a.clock()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.finalizeLocked(stage, rid, reqStart, now)
}

func (a *Aggregator) finalizeLocked(stage int, rid string, reqStart, now float64) {
	if _, done := a.e2eDone[rid]; done {
		return
	}
	if stage >= 0 && stage < a.numStages {
		a.stageLast[stage] = max(a.stageLast[stage], now)
		a.hasLast[stage] = true
	}
	a.lastFinish = max(a.lastFinish, now)
	e2eMs := (now - reqStart) * 1000
	var tokens int64
	for _, ev := range a.stageEvents[rid] {
		if ev.StageID == 0 {
			tokens += int64(ev.NumTokensIn)
		}
		tokens += int64(ev.NumTokensOut)
	}
	var tt float64
	var tb int64
	for _, k := range a.transferOrder {
		if k.rid == rid {
			e := a.transfers[k]
			tt += e.totalTimeMs()
			tb += e.SizeBytes
		}
	}
	a.e2eTotalMs += e2eMs
	a.e2eTotalTokens += tokens
	a.e2eCount++
	a.e2eDone[rid] = struct{}{}
	a.e2eEvents = append(a.e2eEvents, RequestE2EStats{
		RequestID: rid, E2ETotalMs: e2eMs, E2ETotalTokens: tokens,
		TransfersTotalTimeMs: tt, TransfersTotalBytes: tb,
	})
}

// e2eDoneFor reports whether rid was finalized.
func (a *Aggregator) e2eDoneFor(rid string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.e2eDone[rid]
	return ok
}

// e2e returns rid's end-to-end record.
func (a *Aggregator) e2e(rid string) (RequestE2EStats, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.e2eLocked(rid)
}

func (a *Aggregator) e2eLocked(rid string) (RequestE2EStats, bool) {
	for _, e := range a.e2eEvents {
		if e.RequestID == rid {
			return e, true
		}
	}
	return RequestE2EStats{}, false
}

// stageEventsOf returns a copy of rid's stage snapshots in arrival order.
func (a *Aggregator) stageEventsOf(rid string) []StageRequestStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	evs := a.stageEvents[rid]
	out := make([]StageRequestStats, len(evs))
	for i, e := range evs {
		out[i] = e.clone()
	}
	return out
}

// Transfers returns rid's edges in insertion order.
func (a *Aggregator) Transfers(rid string) []TransferEdgeStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.transfersLocked(rid)
}

func (a *Aggregator) transfersLocked(rid string) []TransferEdgeStats {
	var out []TransferEdgeStats
	for _, k := range a.transferOrder {
		if k.rid == rid {
			out = append(out, *a.transfers[k])
		}
	}
	return out
}

// FinalizedRequest gathers what Prometheus observes for a finalized rid (the chat path; turns use
// TurnMetrics.Record). ok is false when rid was not finalized.
func (a *Aggregator) FinalizedRequest(rid, finishedReason string) (FinalizedRequest, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e2e, ok := a.e2eLocked(rid)
	if !ok {
		return FinalizedRequest{}, false
	}
	evs := slices.Clone(a.stageEvents[rid])
	return FinalizedRequest{
		FinishedReason: finishedReason,
		E2E:            e2e,
		Stages:         evs,
		Transfers:      a.transfersLocked(rid),
	}, true
}

// addStageEvent appends a row without RX accounting (the turn recorded RX per segment).
func (a *Aggregator) addStageEvent(stage int, rid string, m StageRequestStats, finalOutputType string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.addStageEventLocked(stage, rid, m, finalOutputType)
}

func (a *Aggregator) recordRX(stage int, rid string, rxBytes int, rxDecodeMs, rxInFlightMs float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recordRXLocked(stage, rid, StageRequestStats{
		RxTransferBytes: rxBytes, RxDecodeTimeMs: rxDecodeMs, RxInFlightTimeMs: rxInFlightMs,
	})
}

// addTX adds copied TX to an edge: time adds up, size is set only if still unknown.
func (a *Aggregator) addTX(from, to int, rid string, txMs float64, dSize int64, usedShm bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.edgeLocked(from, to, rid)
	e.TxTimeMs += txMs
	e.UsedShm = e.UsedShm || usedShm
	if e.SizeBytes == 0 && dSize > 0 {
		e.SizeBytes = dSize
	}
}

// addSend records one connector send of a turn directly on its edge: size and times add up.
func (a *Aggregator) addSend(from, to int, rid string, size int64, txMs, blockedMs float64, usedShm bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.edgeLocked(from, to, rid)
	e.SizeBytes += size
	e.TxTimeMs += txMs
	e.BackpressureTimeMs += blockedMs
	e.UsedShm = e.UsedShm || usedShm
}

// onFinalizeRequestAt is onFinalizeRequest with an explicit end time (a duplex turn ends when
// its last stage produced its last unit, which may be before the finalize call).
func (a *Aggregator) onFinalizeRequestAt(stage int, rid string, reqStart, end float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.finalizeLocked(stage, rid, reqStart, end)
}

// setE2EExtras lets the turn fill the omniserve-only figures of rid's e2e record.
func (a *Aggregator) setE2EExtras(rid string, fill func(*RequestE2EStats)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.e2eEvents {
		if a.e2eEvents[i].RequestID == rid {
			fill(&a.e2eEvents[i])
		}
	}
}

// setStructuredRecords is withStructuredRecords after construction.
func (a *Aggregator) setStructuredRecords(on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.structured = on
}

// clampStageLast caps every stage's last timestamp at end (and its first, so a wall time is
// never negative).
func (a *Aggregator) clampStageLast(end float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.stageLast {
		if a.hasLast[i] && a.stageLast[i] > end {
			a.stageLast[i] = end
		}
		if a.hasFirst[i] && a.stageFirst[i] > end {
			a.stageFirst[i] = end
		}
	}
}
