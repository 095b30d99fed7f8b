package metrics

import "sync"

// PendingTurn buffers the stage snapshots of a duplex session that arrive while no turn is open
// (auto-response: the engine works before begin_response), plus the next turn's arrival stamp.
// Snapshots are merged per stage as they arrive with the collapse rules, so a long listen-only
// stretch costs O(stages) memory, not O(chunks) (vllm-omni kept every snapshot until the turn
// began, growing without bound while the user only listened). A nil *PendingTurn does nothing.
// Methods are safe for concurrent use.
type PendingTurn struct {
	mu         sync.Mutex
	clock      Clock
	stages     []pendingStage
	arrival    float64
	hasArrival bool
	inputEnd   float64 // end of the next turn's input (last MarkInputEnd); 0 = none
	dropped    int     // snapshots dropped because no input had started (silence, setup)
}

type pendingStage struct {
	merger   Merger
	fot      string
	submitTS float64 // first positive submit time
	// RX adds up per segment (record_transfer_rx), while the merged row keeps the first
	// segment's rx_* values; keep the sums apart so replay accounts RX like one-for-one replay.
	rxBytes      int
	rxDecodeMs   float64
	rxInFlightMs float64
}

// NewPendingTurn makes an empty buffer; a nil clock means Now.
func NewPendingTurn(clock Clock) *PendingTurn {
	if clock == nil {
		clock = Now
	}
	return &PendingTurn{clock: clock}
}

// MarkArrival stamps the next turn's t0 unless a stamp already exists (keep first) and returns
// the stamp. ts <= 0 means now. Call it at the first user-input event (commit or append) after
// the previous turn opened; the stamp survives that turn's finalize and is consumed by BeginTurn.
// On an auto-response handoff the next turn's first append comes before the old turn ends; the
// reference wiped that stamp at finalize, so the new turn's e2e started at begin_response instead
// of at the user's input.
func (p *PendingTurn) MarkArrival(ts float64) float64 {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.markLocked(ts)
}

func (p *PendingTurn) markLocked(ts float64) float64 {
	if !p.hasArrival {
		if ts <= 0 {
			ts = p.clock()
		}
		p.arrival, p.hasArrival = ts, true
	}
	return p.arrival
}

// Arrival returns the stamp, if any.
func (p *PendingTurn) Arrival() (float64, bool) {
	if p == nil {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.arrival, p.hasArrival
}

// Add merges a snapshot that arrived with no open turn. Only user input stamps a turn's t0
// (MarkArrival): a snapshot that arrives while nothing is stamped is work before the user began
// (server-side silence, session setup); it belongs to no turn and is dropped, so silence never
// stamps and never bills its ASR time to the next turn (docs/STATS.md). Add reports whether the
// snapshot was kept.
func (p *PendingTurn) Add(stage int, m StageRequestStats, finalOutputType string, submitTS float64) bool {
	if p == nil || stage < 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.hasArrival {
		p.dropped++
		return false
	}
	for stage >= len(p.stages) {
		p.stages = append(p.stages, pendingStage{})
	}
	ps := &p.stages[stage]
	ps.merger.Add(m)
	if finalOutputType != "" {
		ps.fot = finalOutputType
	}
	if ps.submitTS <= 0 && submitTS > 0 {
		ps.submitTS = submitTS
	}
	if ps.rxBytes == 0 {
		ps.rxBytes = m.RxTransferBytes
	}
	ps.rxDecodeMs += m.RxDecodeTimeMs
	ps.rxInFlightMs += m.RxInFlightTimeMs
	return true
}

// Dropped is the number of snapshots Add dropped because no input had started.
func (p *PendingTurn) Dropped() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// MarkInputEnd records the end of the next turn's user input (commit, speech_stopped, VAD
// endpoint, item create); the last call before BeginTurn wins.
func (p *PendingTurn) MarkInputEnd(ts float64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ts <= 0 {
		ts = p.clock()
	}
	p.inputEnd = ts
}

// MarkInputEndIfUnset is MarkInputEnd unless an input end is already recorded (the engine's own
// endpoint is a fallback for sessions without server-VAD events).
func (p *PendingTurn) MarkInputEndIfUnset(ts float64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inputEnd > 0 {
		return
	}
	if ts <= 0 {
		ts = p.clock()
	}
	p.inputEnd = ts
}

// DropRows drops the buffered rows but keeps the stamp and the input end.
func (p *PendingTurn) DropRows() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stages = nil
}

// ClearInput is input_audio_buffer.clear: the buffered rows, the t0 stamp and the input end are
// dropped, so a cleared utterance is billed to no turn.
func (p *PendingTurn) ClearInput() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stages, p.arrival, p.hasArrival, p.inputEnd = nil, 0, false, 0
}

// Stages is the number of stage rows buffered (at most the number of stages, however many
// snapshots arrived).
func (p *PendingTurn) Stages() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for i := range p.stages {
		if p.stages[i].merger.Len() > 0 {
			n++
		}
	}
	return n
}

// SegmentCount is the number of snapshots merged into the buffer.
func (p *PendingTurn) SegmentCount() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for i := range p.stages {
		n += p.stages[i].merger.Len()
	}
	return n
}

// Row returns the merged row buffered for stage.
func (p *PendingTurn) Row(stage int) (StageRequestStats, bool) {
	if p == nil {
		return StageRequestStats{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if stage < 0 || stage >= len(p.stages) || p.stages[stage].merger.Len() == 0 {
		return StageRequestStats{}, false
	}
	return p.stages[stage].merger.Result().Clone(), true
}

// ReplayInto moves the buffered rows into t in stage order, keeping each stage's first submit
// time, and empties the buffer (not the arrival stamp). The merge state (token weights) moves
// with the rows, so the turn's final collapse equals folding every snapshot one by one.
func (p *PendingTurn) ReplayInto(t *TurnMetrics) {
	if p == nil || t == nil {
		return
	}
	p.mu.Lock()
	stages := p.stages
	p.stages = nil
	p.mu.Unlock()
	for i := range stages {
		ps := &stages[i]
		if ps.merger.Len() > 0 {
			t.replay(i, ps)
		}
	}
}

// TakeArrival returns and clears the stamp.
func (p *PendingTurn) TakeArrival() (float64, bool) {
	if p == nil {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.arrival, p.hasArrival
	p.arrival, p.hasArrival = 0, false
	return a, ok
}

// Reset drops the buffered rows and the stamp (session close).
func (p *PendingTurn) Reset() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stages, p.arrival, p.hasArrival, p.inputEnd = nil, 0, false, 0
}

// BeginTurn opens a turn the way vllm-omni's begin_turn_metrics does: its t0 is
// arrival if > 0, else the stored stamp, else now; the buffered snapshots are replayed into it and
// the stamp is cleared.
func (p *PendingTurn) BeginTurn(requestID, responseID string, turnID int, arrival float64, numStages int, session *Aggregator) *TurnMetrics {
	if p == nil {
		return nil
	}
	stamp, ok := p.TakeArrival()
	if arrival <= 0 && ok {
		arrival = stamp
	}
	p.mu.Lock()
	inputEnd := p.inputEnd
	p.inputEnd = 0
	p.mu.Unlock()
	t := NewTurn(requestID, responseID, turnID, arrival, numStages, session, p.clock)
	if inputEnd <= 0 {
		inputEnd = t.arrival // a text item: its create is both the start and the end of input
	}
	t.MarkInputEnd(inputEnd)
	p.ReplayInto(t)
	return t
}

// replay installs a pending stage's merge state in an open turn.
func (t *TurnMetrics) replay(stage int, ps *pendingStage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finalized {
		return
	}
	st := t.stageLocked(stage)
	if st.merger.Len() == 0 {
		st.merger = ps.merger
		st.merger.cur.RequestID = t.responseID
	} else {
		st.merger.Add(ps.merger.Result())
	}
	if ps.fot != "" {
		st.fot = ps.fot
	}
	t.segments += ps.merger.Len()
	t.agg.recordRX(stage, t.responseID, ps.rxBytes, ps.rxDecodeMs, ps.rxInFlightMs)
	t.agg.MarkStageTimes(stage, ps.submitTS)
}
