package session

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// semantic_vad: a pause in the user's speech ends the turn when the thinker thinks the user is
// done. After MinSilenceMs of silence the session asks the engine for the probability its
// thinker gives the chat template's end-of-user-turn token right after the ASR's partial
// transcript (endOfTurnEstimator; LiveKit's turn detector reads the same signal from a small
// model). At or above the eagerness's threshold the turn ends at once; below it the session
// waits, and the turn ends when the pause reaches the eagerness's maximum wait (OpenAI's 8 / 4
// / 2 s), unless the user speaks again, which continues the same turn. Silence is counted in
// input audio, as server_vad counts it. docs/REALTIME.md says why these numbers.

// SemanticEndpointing is semantic_vad's end-of-turn rule for one eagerness: the stage's table,
// which the auto-response stream endpoints on too (stage/duplex_semvad.go).
type SemanticEndpointing = duplex.SemanticEndpointing

// SemanticParams returns the rule of an eagerness (auto is medium, as OpenAI defines it).
func SemanticParams(eagerness string) SemanticEndpointing {
	return duplex.SemanticParams(eagerness)
}

// End-of-turn reasons (EndOfTurn.Reason).
const (
	endOfTurnSemantic = duplex.EndOfTurnSemantic
	endOfTurnMaxWait  = duplex.EndOfTurnMaxWait
	endOfTurnSilence  = duplex.EndOfTurnSilence
)

// endOfTurnEstimator is implemented by engines whose thinker can estimate whether the user's
// open utterance ends the turn (requestclient.DuplexRequest.EndOfTurnProb). Without it,
// semantic_vad ends a turn on silence alone (SemanticSilenceMs) and logs why.
type endOfTurnEstimator interface {
	EndOfTurnProb(ctx context.Context) (requestclient.EndOfTurn, error)
}

// EndOfTurnProb implements endOfTurnEstimator.
func (e pipelineEngine) EndOfTurnProb(ctx context.Context) (requestclient.EndOfTurn, error) {
	return e.DuplexRequest.EndOfTurnProb(ctx)
}

// endOfTurnObserver is implemented by the manager's metrics when they count semantic_vad's
// decisions (metrics.Collectors).
type endOfTurnObserver interface {
	ObserveEndOfTurn(reason string, prob float64, scored bool)
}

// The production metrics count the decisions (the manager holds them as ManagerMetrics).
var _ endOfTurnObserver = (*metrics.Collectors)(nil)

// semState is semantic_vad on the actor: its pause, the decision, and the events and records
// the decision makes. The estimate runs on a goroutine of its own (one at a time) whose answer
// comes back through results; the actor owns it (Run stops the timer and waits for wg). It
// reaches the rest of the session through the narrow fields below and the semMoment each call
// gets, never through the Session.
type semState struct {
	// send sends an effect at the session's current epoch.
	send     func(Effect)
	log      *zap.Logger
	observer endOfTurnObserver // nil: decisions are not counted
	wall     func() float64    // the statistics clock (the turn's input end)

	pause   *semPause
	seq     int // pauses begun; an answer for an older one is stale
	asking  bool
	results chan eotAnswer // cap 1: at most one estimate is in flight
	// timer ends a pause at its maximum wait in wall time when the client stops sending audio
	// (a client that sends its speech and a second of silence, then waits): silence counts in
	// input audio while it arrives, and in time when it does not. Stopped while no pause runs.
	timer *time.Timer
	wg    sync.WaitGroup
	// noEstimate is why the last pause had no estimate, logged when it changes.
	noEstimate string
}

// semPause is a pause after speech whose end of turn is not decided yet.
type semPause struct {
	seq      int
	endMs    float64 // session input position where the speech ended
	asked    bool
	scored   bool
	prob     float64
	text     string // the partial transcript the estimate was made on
	fallback bool   // no estimate: silence alone decides
	// startedAt is when the pause began (wall time) and startSilenceMs the silence already heard
	// then: the pause's length in time is startSilenceMs + time since startedAt.
	startedAt      time.Time
	startSilenceMs float64
	timedOut       bool // the maximum wait passed in time (timer)
}

type eotAnswer struct {
	seq int
	e   requestclient.EndOfTurn
	err error
}

// semanticPauses reports whether speech_stopped waits for semantic_vad's decision: manual
// turns (realtime and transcription sessions). A duplex auto-response session's stage
// endpoints itself (semvad_duplex.go).
func semanticPauses(td *TurnDetection, autoResponse bool) bool {
	return td != nil && td.Type == "semantic_vad" && !autoResponse
}

// vadSilenceMs is the VAD's silence window under td: semantic_vad's pause detection uses the
// minimum silence, the rest td's own.
func vadSilenceMs(td *TurnDetection, autoResponse bool) int {
	if semanticPauses(td, autoResponse) {
		return SemanticParams(td.Eagerness).MinSilenceMs
	}
	return td.SilenceDurationMs
}

// begin starts a pause at input position endMs (the speech's end), inputMs of input heard so
// far, at now; its timer runs out at rule's maximum wait in time. The open speech segment stays
// announced until the pause is decided.
func (m *semState) begin(endMs, inputMs float64, rule SemanticEndpointing, now time.Time) {
	m.seq++
	p := &semPause{seq: m.seq, endMs: endMs, startedAt: now, startSilenceMs: max(0, inputMs-endMs)}
	m.pause = p
	wait := max(time.Duration(float64(rule.MaxWaitMs)-p.startSilenceMs)*time.Millisecond, 0)
	if m.timer == nil {
		m.timer = time.NewTimer(wait)
		return
	}
	m.stopTimer()
	m.timer.Reset(wait)
}

// timerC is the pause timer's channel (nil, never ready, before the first pause).
func (m *semState) timerC() <-chan time.Time {
	if m.timer == nil {
		return nil
	}
	return m.timer.C
}

func (m *semState) stopTimer() {
	if m.timer != nil && !m.timer.Stop() {
		select {
		case <-m.timer.C:
		default:
		}
	}
}

// drop forgets the undecided pause (the user spoke again in the same turn, or the client
// committed or cleared the buffer itself) and reports whether there was one.
func (m *semState) drop() bool {
	if m.pause == nil {
		return false
	}
	m.pause = nil
	m.stopTimer()
	return true
}

// decide is the pause's end of turn, or nil while the turn goes on: the estimate at or above
// rule's threshold, silence alone without an estimate, or the maximum wait (in input audio
// heard, inputMs, or in time since the pause began when its timer ran out). A decided pause is
// dropped.
func (m *semState) decide(p *semPause, rule SemanticEndpointing, eagerness string, inputMs float64, now time.Time) *EndOfTurn {
	silence := inputMs - p.endMs
	if p.timedOut {
		silence = max(silence, p.startSilenceMs+float64(now.Sub(p.startedAt))/float64(time.Millisecond))
	}
	reason := ""
	switch {
	case p.scored && p.prob >= rule.Threshold:
		reason = endOfTurnSemantic
	case p.fallback && silence >= float64(SemanticSilenceMs(eagerness)):
		reason = endOfTurnSilence
	case silence >= float64(rule.MaxWaitMs) || p.timedOut:
		reason = endOfTurnMaxWait
	default:
		return nil
	}
	info := &EndOfTurn{Reason: reason, SilenceMs: int(silence)}
	if p.scored {
		prob := p.prob
		info.Probability = &prob
	}
	m.drop()
	return info
}

// ask starts the estimate of pause p on a goroutine of its own (est: the engine's estimator,
// nil when it has none; heardAll: the ASR has heard the whole buffer), bounded by wait. It
// returns why p has no estimate ("" when one was asked for, or one for an older pause is still
// in flight: p asks when its answer arrives).
func (m *semState) ask(ctx context.Context, p *semPause, est endOfTurnEstimator, heardAll bool, wait time.Duration) (noEstimate string) {
	if m.asking {
		return ""
	}
	p.asked = true
	switch {
	case est == nil:
		return m.without(p, "the engine gives no end-of-turn estimate")
	case !heardAll:
		return m.without(p, "the input has not all reached the engine's ASR (kept back during a response)")
	}
	if m.results == nil {
		m.results = make(chan eotAnswer, 1)
	}
	m.asking = true
	seq, results := p.seq, m.results
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		// An answer later than the maximum wait could not change the decision.
		ctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		e, err := est.EndOfTurnProb(ctx)
		results <- eotAnswer{seq: seq, e: e, err: err} // cap 1, one in flight: never blocks
	}()
	return ""
}

// without marks p as decided by silence alone and returns why, or "" when the last pause had
// no estimate for the same reason (it is logged once per change).
func (m *semState) without(p *semPause, why string) string {
	p.fallback = true
	if why == m.noEstimate {
		return ""
	}
	m.noEstimate = why
	return why
}

// answer applies estimate a to the current pause: it returns the pause when a is its own
// (scored, or without an estimate: noEstimate says why when that is news), or reask when a
// was stale and the current pause has not asked yet.
func (m *semState) answer(a eotAnswer) (p *semPause, reask bool, noEstimate string) {
	m.asking = false
	p = m.pause
	if p == nil {
		return nil, false, ""
	}
	if a.seq != p.seq {
		return nil, !p.asked, ""
	}
	if a.err != nil {
		return p, false, m.without(p, a.err.Error())
	}
	m.noEstimate = ""
	p.scored, p.prob, p.text = true, a.e.Prob, a.e.Text
	return p, false, ""
}

// semMoment is the session as semantic_vad's decision reads it, at that moment.
type semMoment struct {
	// in is the input: its position, the open speech segment, what of it reached the engine.
	in *inputAudio
	// td is the turn detection while semantic_vad's manual pauses are in force
	// (settings.semanticVAD); nil otherwise.
	td     *TurnDetection
	engine Engine // nil before the stream opens: no estimate, no statistics
	turn   int    // the turn the input builds (Session.input)
}

// semanticVAD is the turn detection while semantic_vad's pauses wait for the session's
// decision (semanticPauses), or nil.
func (c *settings) semanticVAD() *TurnDetection {
	if !semanticPauses(c.cfg.TurnDetection, c.autoResponse()) {
		return nil
	}
	return c.cfg.TurnDetection
}

// timedOut runs on the actor when the pause timer fires: a pause still undecided has lasted its
// maximum wait in time, though the audio that says so did not arrive. It reports whether the
// turn ended (the caller commits it).
func (m *semState) timedOut(at semMoment) bool {
	p := m.pause
	if p == nil || at.td == nil {
		return false
	}
	p.timedOut = true
	return m.endOfTurn(p, at)
}

// abandon ends an undecided pause without a decision: the client committed or cleared the
// buffer itself. The speech segment it held open is closed, as server_vad's was at its stop.
func (m *semState) abandon(in *inputAudio) {
	if m.drop() && in.inSpeech {
		in.inSpeech = false
		m.send(InputSpeech{Phase: PhaseStopped, AudioMs: int(in.inputMs), ItemID: in.speechItemID})
	}
}

// end asks for the pause's estimate when it has none yet and reports whether the turn ends
// now; the caller then commits the buffer as server_vad does at speech_stopped. Call it after
// the append was buffered and forwarded. ctx is the engine jobs' context.
func (m *semState) end(ctx context.Context, at semMoment) bool {
	p := m.pause
	if p == nil || at.td == nil {
		return false
	}
	if !p.asked && at.in.inputMs-p.endMs < float64(SemanticParams(at.td.Eagerness).MaxWaitMs) {
		// (An append that already holds the whole maximum wait ends the turn without asking.)
		m.askFor(ctx, p, at)
	}
	return m.endOfTurn(p, at)
}

// askFor asks for p's estimate (ask), logging why there is none when that is news.
func (m *semState) askFor(ctx context.Context, p *semPause, at semMoment) {
	est, _ := at.engine.(endOfTurnEstimator)
	wait := time.Duration(SemanticParams(at.td.Eagerness).MaxWaitMs) * time.Millisecond
	if why := m.ask(ctx, p, est, at.in.inputFwd >= len(at.in.inputBuf), wait); why != "" {
		m.log.Info("semantic_vad: no end-of-turn estimate; silence alone ends the turn", zap.String("reason", why))
	}
}

// endOfTurn ends the turn (speech_stopped with the reason) when decide says the pause's
// estimate, or its length, ends it.
func (m *semState) endOfTurn(p *semPause, at semMoment) bool {
	eagerness := at.td.Eagerness
	info := m.decide(p, SemanticParams(eagerness), eagerness, at.in.inputMs, time.Now())
	if info == nil {
		return false
	}
	at.in.inSpeech = false
	m.send(InputSpeech{Phase: PhaseStopped, AudioMs: int(at.in.inputMs), ItemID: at.in.speechItemID, EndOfTurn: info})
	if ts := turnStats(at.engine); ts != nil {
		ts.MarkInputEnd(at.turn, m.wall())
	}
	m.log.Debug("semantic_vad end of turn", zap.String("reason", info.Reason), zap.Float64("probability", p.prob),
		zap.Bool("scored", p.scored), zap.Int("silence_ms", info.SilenceMs), zap.String("eagerness", eagerness))
	if m.observer != nil {
		m.observer.ObserveEndOfTurn(info.Reason, p.prob, p.scored)
	}
	return true
}

// answered applies an estimate on the actor and reports whether the turn ended (the caller
// commits it): the pause it was for ends the turn when it is high enough; a stale answer lets
// the current pause ask.
func (m *semState) answered(ctx context.Context, a eotAnswer, at semMoment) bool {
	if at.td == nil {
		m.asking = false
		return false
	}
	p, reask, why := m.answer(a)
	if why != "" {
		m.log.Info("semantic_vad: no end-of-turn estimate; silence alone ends the turn", zap.String("reason", why))
	}
	switch {
	case reask:
		m.askFor(ctx, m.pause, at)
	case p != nil:
		return m.endOfTurn(p, at)
	}
	return false
}
