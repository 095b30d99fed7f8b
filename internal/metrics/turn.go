package metrics

import (
	"slices"
	"sync"

	"go.uber.org/zap"
)

// TurnMetrics collects one assistant turn of a duplex session (one response_id), the unit that
// prints one set of --log-stats tables, or one chat completion (NewRequestTurn): both close once
// and yield one FinalizedRequest that the tables, Prometheus and tracing read. Snapshots are merged per
// stage as they arrive, so a turn holds O(stages) rows however many segments the engine emits; the
// result is vllm-omni's collapse at finalize (one row per stage). Closing builds the record once
// (FinalizedRequest, with what the tables show beside the rows); the tables are a function of it.
//
// A nil *TurnMetrics is valid and does nothing: callers with --log-stats off simply never create
// one, and that path allocates nothing (vllm-omni built aggregators and copied every snapshot
// even with --log-stats off). Methods are safe for concurrent use.
type TurnMetrics struct {
	mu         sync.Mutex
	requestID  string
	responseID string
	turnID     int
	arrival    float64
	numStages  int
	clock      Clock
	structured bool // the tables are logged as structured records (SetStructuredRecords)

	stages    []turnStage         // index = stage id
	spans     []stageSpan         // index = stage id < numStages: the Overall Summary's stage wall times
	edges     []TransferEdgeStats // one per (from, to) edge, in first-use order; RequestID is set at close
	wallEnd   float64             // the Overall Summary's wall time ends here (at least arrival)
	segments  int
	finalized bool
	reason    string

	firstAudio      float64
	firstAudioStage int
	firstText       float64         // first text unit of any stage; 0 = none
	inputEnd        float64         // end of the user input this turn answers; 0 = unknown
	genEnd          float64         // every working stage finished (MarkStagesDone); 0 = not yet
	deliveredS      float64         // audio sent to the client (SetDelivered)
	playedS         float64         // audio the client acknowledged as played (SetPlayed)
	deliveredEnd    float64         // when delivery ended; 0 = at finalize
	underrunS       float64         // client playback starved (SetUnderrun)
	detachedMs      float64         // delivery paused while the client was disconnected (SetDetached)
	toolCalls       []ToolCallStats // tool and MCP calls timed for the turn (AddToolCalls)
	record          FinalizedRequest
	summary         summary
	req             *requestTurn // a chat completion's turn (NewRequestTurn); nil for duplex
}

type turnStage struct {
	merger      merger
	fot         string
	firstOutput float64 // wall time of the stage's first output for this turn; 0 = none
}

// newTurn opens a duplex turn. requestID is the session's stage-0 resource id, responseID keys
// the turn (titles, e2e), turnID < 0 means unknown (left out of titles). arrival is the turn's t0
// (the commit or first append of the user input that led to it); arrival <= 0 means now.
func newTurn(requestID, responseID string, turnID int, arrival float64, numStages int, clock Clock) *TurnMetrics {
	return newTurnMetrics(requestID, responseID, turnID, arrival, numStages, clock)
}

// newTurnMetrics is what every turn starts from, duplex or chat: its ids, its t0 (arrival <= 0:
// now), at least one stage and a clock (nil: Now).
func newTurnMetrics(requestID, responseID string, turnID int, arrival float64, numStages int, clock Clock) *TurnMetrics {
	if clock == nil {
		clock = Now
	}
	if arrival <= 0 {
		arrival = clock()
	}
	numStages = max(numStages, 1)
	return &TurnMetrics{
		requestID:  requestID,
		responseID: responseID,
		turnID:     turnID,
		arrival:    arrival,
		numStages:  numStages,
		clock:      clock,
		stages:     make([]turnStage, numStages),
		spans:      make([]stageSpan, numStages),
		wallEnd:    arrival,
	}
}

// NewInputTurn opens a duplex turn at its first input (arrival, <= 0: now), before its response
// exists: the rows of the input accumulate into it as they arrive, and Begin attaches the
// response when it begins. requestID is the session's stage-0 resource id. Until Begin the
// turn's response id is empty and its turn id unknown (-1).
func NewInputTurn(requestID string, arrival float64, numStages int, clock Clock) *TurnMetrics {
	return newTurn(requestID, "", -1, arrival, numStages, clock)
}

// Begin attaches the turn's response (response_id keys its rows and titles, turnID is its
// number) and reports whether it did: a turn begins once. The input end defaults to t0 when
// none was marked (a text item: its create is both the start and the end of the input).
func (t *TurnMetrics) Begin(responseID string, turnID int) bool {
	if t == nil || responseID == "" {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.responseID != "" || t.finalized {
		return false
	}
	t.responseID, t.turnID = responseID, turnID
	for i := range t.stages {
		if t.stages[i].merger.len() > 0 {
			t.stages[i].merger.cur.RequestID = responseID
		}
	}
	if t.inputEnd <= 0 {
		t.inputEnd = t.arrival
	}
	return true
}

// Begun reports whether the turn's response is attached (Begin ran, or newTurn named it).
func (t *TurnMetrics) Begun() bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.responseID != ""
}

// SetStructuredRecords makes Finalize log structured records instead of ASCII tables
// (logRecords): for --log-format json, so a log pipeline needs no regex.
func (t *TurnMetrics) SetStructuredRecords(on bool) {
	if t != nil {
		t.mu.Lock()
		t.structured = on
		t.mu.Unlock()
	}
}

// ResponseID keys the turn ("" before Begin).
func (t *TurnMetrics) ResponseID() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.responseID
}

// Arrival is the turn's t0 in wall seconds.
func (t *TurnMetrics) Arrival() float64 { return t.arrival }

// Finalized reports whether Finalize already ran.
func (t *TurnMetrics) Finalized() bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.finalized
}

// finishedReason is the normalized reason given to Finalize ("" before).
func (t *TurnMetrics) finishedReason() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reason
}

// SegmentCount is the number of snapshots accumulated (before collapse).
func (t *TurnMetrics) SegmentCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.segments
}

// StageRows returns the merged row of every stage that has data, in stage order.
func (t *TurnMetrics) StageRows() []StageRequestStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []StageRequestStats
	for i := range t.stages {
		if t.stages[i].merger.len() > 0 {
			r := t.stages[i].merger.result().clone()
			r.StageID = i
			out = append(out, r)
		}
	}
	return out
}

// Accumulate adds one stage snapshot to the open turn (ignored once finalized). The snapshot is
// copied, never retained. Its RX figures land on the turn's (stage-1 → stage, response_id) edge.
// The stage's first timestamp prefers submitTS (> 0) over receipt time; the last is receipt time.
func (t *TurnMetrics) Accumulate(stage int, m StageRequestStats, finalOutputType string, submitTS float64) {
	if t == nil || stage < 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finalized {
		return
	}
	if t.req != nil {
		t.accumulateRequestLocked(stage, m, finalOutputType, submitTS)
		return
	}
	st := t.stageLocked(stage)
	m.RequestID = t.responseID
	st.merger.add(m)
	if finalOutputType != "" {
		st.fot = finalOutputType
	}
	t.segments++
	t.recordRXLocked(stage, m)
	t.markStageLocked(stage, submitTS, t.clock())
}

func (t *TurnMetrics) stageLocked(stage int) *turnStage {
	for stage >= len(t.stages) {
		t.stages = append(t.stages, turnStage{})
	}
	return &t.stages[stage]
}

// MarkFirstOutput records when a stage first produced client-visible output for this turn; the
// first call per stage wins. At Finalize the stage's serving_time_to_first_output_ms becomes the
// real duration from arrival to that output (vllm-omni put an epoch timestamp there and had to
// hide the row in duplex tables), and an audio stage's mark is the turn's audio time to first
// packet.
func (t *TurnMetrics) MarkFirstOutput(stage int, ts float64, audio bool) {
	if t == nil || stage < 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finalized {
		return
	}
	if ts <= 0 {
		ts = t.clock()
	}
	st := t.stageLocked(stage)
	if st.firstOutput == 0 {
		st.firstOutput = ts
	}
	if audio && t.firstAudio == 0 {
		t.firstAudio, t.firstAudioStage = ts, stage
	}
	if !audio && t.firstText == 0 {
		t.firstText = ts
	}
}

// MarkInputEnd records the end of the user input the turn answers (commit, speech_stopped, VAD
// endpoint, item create); input end → first output is measured from it. The last call wins.
func (t *TurnMetrics) MarkInputEnd(ts float64) {
	if ts > 0 {
		t.whileOpen(func() { t.inputEnd = ts })
	}
}

// MarkInputEndIfUnset is MarkInputEnd unless an input end is already recorded (the engine's own
// endpoint is a fallback for sessions without server-VAD events); ts <= 0 means now.
func (t *TurnMetrics) MarkInputEndIfUnset(ts float64) {
	if t != nil { // &t.inputEnd would dereference a nil turn
		t.markFirst(&t.inputEnd, ts)
	}
}

// MarkStagesDone records when every stage that worked for the turn had finished (the last
// stage produced its last unit, or reported its partial snapshot after an abort): the end of
// e2e_total_ms. The first call wins; without one, e2e ends at Finalize.
func (t *TurnMetrics) MarkStagesDone(ts float64) {
	if t != nil {
		t.markFirst(&t.genEnd, ts)
	}
}

// markFirst sets *field to ts (ts <= 0: now) unless it is already set or the turn is finalized:
// the first mark of a moment wins.
func (t *TurnMetrics) markFirst(field *float64, ts float64) {
	t.whileOpen(func() {
		if *field > 0 {
			return
		}
		if ts <= 0 {
			ts = t.clock()
		}
		*field = ts
	})
}

// SetDelivered records the audio actually sent to the client (seconds) and when delivery ended
// (ts <= 0: at Finalize). Delivery is a figure of its own, apart from generation.
func (t *TurnMetrics) SetDelivered(audioS, ts float64) {
	t.whileOpen(func() {
		t.deliveredS = max(audioS, 0)
		if ts > 0 {
			t.deliveredEnd = ts
		}
	})
}

// SetUnderrun records the time the client's playback ran out of sent audio during the turn.
func (t *TurnMetrics) SetUnderrun(s float64) { t.whileOpen(func() { t.underrunS = max(s, 0) }) }

// whileOpen runs set under the turn's lock unless the turn is nil or finalized (its record is
// immutable).
func (t *TurnMetrics) whileOpen(set func()) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.finalized {
		set()
	}
}

// SetPlayed records the audio the client acknowledged as played (playback.ack), in seconds:
// delivery as the listener had it, next to what was sent (SetDelivered).
func (t *TurnMetrics) SetPlayed(s float64) { t.whileOpen(func() { t.playedS = max(s, 0) }) }

// SetDetached records how long delivery of the turn was paused because its client was
// disconnected and then resumed the session: a delivery delay of the same turn.
func (t *TurnMetrics) SetDetached(ms float64) { t.whileOpen(func() { t.detachedMs = max(ms, 0) }) }

// AddTransfer records one connector send of this turn on its (from → to) edge: size and tx time
// add up; blockedMs (waiting for room on a full queue) is backpressure, not transfer time.
func (t *TurnMetrics) AddTransfer(from, to int, sizeBytes int64, txMs, blockedMs float64, usedShm bool) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finalized {
		return
	}
	if t.req != nil {
		t.addRequestSendLocked(from, to, sizeBytes, txMs, usedShm)
		return
	}
	e := t.edgeLocked(from, to)
	e.SizeBytes += sizeBytes
	e.TxTimeMs += txMs
	e.BackpressureTimeMs += blockedMs
	e.UsedShm = e.UsedShm || usedShm
}

// Finalize ends the turn once: it writes one collapsed row per stage, records the e2e time from
// arrival, and, when logStats is set, logs the tables with the turn's identity in the titles and
// the [OmniTiming] line. It returns false when the turn was already finalized. It is marked
// finalized before rendering, so a panic while rendering (a bug, recovered at the caller's
// goroutine root) can never finalize it twice. A chat request's turn (NewRequestTurn) logs its
// tables when it was opened with them, whatever logStats says.
func (t *TurnMetrics) Finalize(reason string, log *zap.Logger, logStats bool) bool {
	if t == nil {
		return false
	}
	if t.req != nil {
		return t.finalizeRequest(reason, log)
	}
	t.mu.Lock()
	if t.finalized {
		t.mu.Unlock()
		return false
	}
	t.finalized = true
	t.reason = NormalizeFinishedReason(reason)
	if t.reason == ReasonStop && len(t.stages) > 0 && t.stages[0].merger.len() > 0 &&
		t.stages[0].merger.result().FinishReason == ReasonLength {
		// Cut by the token limit: the session ends it like a natural end, the log says length.
		t.reason = ReasonLength
	}
	t.closeLocked()
	t.mu.Unlock()
	if logStats {
		t.printTables(log)
	}
	return true
}

// closeLocked builds the turn's record once from its merged rows, edges and marks (under t.mu).
// Accumulate and MarkFirstOutput ignore a finalized turn, so the stage rows are stable here.
func (t *TurnMetrics) closeLocked() {
	rows := make([]StageRequestStats, 0, len(t.stages))
	for i := range t.stages {
		st := &t.stages[i]
		if st.merger.len() == 0 {
			continue
		}
		row := st.merger.result()
		if st.firstOutput > 0 {
			row.ServingTimeToFirstOutputMs = max(st.firstOutput-t.arrival, 0) * 1000
		}
		row.StageID, row.RequestID = i, t.responseID
		if st.fot != "" {
			row.FinalOutputType = st.fot
		}
		rows = append(rows, row)
	}
	now := t.clock()
	end := now
	if t.genEnd > 0 {
		end = max(t.genEnd, t.arrival)
		// Nothing of the turn ends after its generation end: snapshots received later (the
		// partial counts of an interrupted turn) do not stretch the stage wall times.
		t.clampSpansLocked(end)
	}
	e := t.closeE2ELocked(t.numStages-1, t.responseID, rows, t.arrival, end)
	if t.inputEnd > t.arrival {
		e.InputMs = (t.inputEnd - t.arrival) * 1000
	}
	if t.inputEnd > 0 && t.firstText >= t.inputEnd {
		e.InputEndToFirstTextMs = (t.firstText - t.inputEnd) * 1000
	}
	if t.inputEnd > 0 && t.firstAudio >= t.inputEnd {
		e.InputEndToFirstAudioMs = (t.firstAudio - t.inputEnd) * 1000
	}
	e.AudioDeliveredS = t.deliveredS
	e.AudioPlayedS = t.playedS
	e.AudioUnderrunS = t.underrunS
	e.DeliveryDetachedMs = t.detachedMs
	if t.deliveredS > 0 {
		dEnd := now
		if t.deliveredEnd > 0 {
			dEnd = t.deliveredEnd
		}
		e.DeliveryTotalMs = max(dEnd-t.arrival, 0) * 1000
	}
	t.record = FinalizedRequest{
		ToolCalls:      t.toolCallsLocked(),
		Duplex:         true,
		FinishedReason: t.reason,
		E2E:            e,
		Stages:         rows,
		Transfers:      t.transfersLocked(t.responseID),
		tables: t.tableInputsLocked(&timingIdentity{
			Req: t.requestID, Response: t.responseID, Turn: t.turnID, Reason: t.reason,
		}),
	}
	if t.firstAudio > 0 {
		t.record.AudioTTFPSeconds = max(t.firstAudio-t.arrival, 0)
		t.record.AudioTTFPStage = t.firstAudioStage
	}
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

// printTables renders the finalized turn's record and logs it (log nil: render only), keeping the
// rendering for tests.
func (t *TurnMetrics) printTables(log *zap.Logger) {
	t.mu.Lock()
	rec, structured := t.record, t.structured
	t.mu.Unlock()
	s := logTables(log, &rec, structured)
	t.mu.Lock()
	t.summary = s
	t.mu.Unlock()
}

// Record is the finalized turn's one record: what the --log-stats tables render, what Prometheus
// observes (Collectors.ObserveFinalized) and tracing exports; ok is false before Finalize.
func (t *TurnMetrics) Record() (FinalizedRequest, bool) {
	if t == nil {
		return FinalizedRequest{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.record, t.finalized && t.record.E2E.RequestID != ""
}

// summary is what the logged Finalize produced (empty when logStats was false).
func (t *TurnMetrics) summarySnapshot() summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.summary
}
