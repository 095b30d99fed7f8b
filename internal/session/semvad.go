package session

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/protocol"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// semantic_vad: a pause in the user's speech ends the turn when the thinker thinks the user is
// done. After MinSilenceMs of silence the session asks the engine for the probability its
// thinker gives the chat template's end-of-user-turn token right after the ASR's partial
// transcript (EndOfTurnEstimator; LiveKit's turn detector reads the same signal from a small
// model). At or above the eagerness's threshold the turn ends at once; below it the session
// waits, and the turn ends when the pause reaches the eagerness's maximum wait (OpenAI's 8 / 4
// / 2 s), unless the user speaks again, which continues the same turn. Silence is counted in
// input audio, as server_vad counts it. docs/REALTIME.md says why these numbers.

// SemanticEndpointing is semantic_vad's end-of-turn rule for one eagerness: the stage's table,
// which the auto-response stream endpoints on too (stage/duplex_semvad.go).
type SemanticEndpointing = requestclient.SemanticEndpointing

// SemanticParams returns the rule of an eagerness (auto is medium, as OpenAI defines it).
func SemanticParams(eagerness string) SemanticEndpointing {
	return requestclient.SemanticParams(eagerness)
}

// End-of-turn reasons (protocol.EndOfTurnInfo.Reason).
const (
	EndOfTurnSemantic = requestclient.EndOfTurnSemantic
	EndOfTurnMaxWait  = requestclient.EndOfTurnMaxWait
	EndOfTurnSilence  = requestclient.EndOfTurnSilence
)

// EndOfTurnEstimator is implemented by engines whose thinker can estimate whether the user's
// open utterance ends the turn (requestclient.DuplexRequest.EndOfTurnProb). Without it,
// semantic_vad ends a turn on silence alone (SemanticSilenceMs) and logs why.
type EndOfTurnEstimator interface {
	EndOfTurnProb(ctx context.Context) (requestclient.EndOfTurn, error)
}

// EndOfTurnProb implements EndOfTurnEstimator.
func (e pipelineEngine) EndOfTurnProb(ctx context.Context) (requestclient.EndOfTurn, error) {
	return e.d.EndOfTurnProb(ctx)
}

// EndOfTurnObserver is implemented by the manager's metrics when they count semantic_vad's
// decisions (metrics.Collectors).
type EndOfTurnObserver interface {
	ObserveEndOfTurn(reason string, prob float64, scored bool)
}

// The production metrics count the decisions (the manager holds them as ManagerMetrics).
var _ EndOfTurnObserver = (*metrics.Collectors)(nil)

// semState is semantic_vad's state on the actor; the estimate runs on a goroutine of its own
// (one at a time) whose answer comes back through results.
type semState struct {
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
// endpoints on silence itself.
func (s *Session) semanticPauses(td *TurnDetection) bool {
	return td != nil && td.Type == "semantic_vad" && !s.autoResponse()
}

// vadSilenceMs is the VAD's silence window under td: semantic_vad's pause detection uses the
// minimum silence, the rest td's own.
func (s *Session) vadSilenceMs(td *TurnDetection) int {
	if s.semanticPauses(td) {
		return SemanticParams(td.Eagerness).MinSilenceMs
	}
	return td.SilenceDurationMs
}

// beginPause starts a pause at input position endMs (the speech's end); the open speech
// segment stays announced until the pause is decided.
func (s *Session) beginPause(endMs float64) {
	s.sem.seq++
	p := &semPause{seq: s.sem.seq, endMs: endMs, startedAt: time.Now(), startSilenceMs: max(0, s.inputMs-endMs)}
	s.sem.pause = p
	if td := s.cfg.TurnDetection; td != nil {
		wait := time.Duration(float64(SemanticParams(td.Eagerness).MaxWaitMs)-p.startSilenceMs) * time.Millisecond
		if s.sem.timer == nil {
			s.sem.timer = time.NewTimer(max(wait, 0))
		} else {
			s.stopPauseTimer()
			s.sem.timer.Reset(max(wait, 0))
		}
	}
}

// pauseTimerC is the pause timer's channel (nil, never ready, before the first pause).
func (s *Session) pauseTimerC() <-chan time.Time {
	if s.sem.timer == nil {
		return nil
	}
	return s.sem.timer.C
}

func (s *Session) stopPauseTimer() {
	if s.sem.timer != nil && !s.sem.timer.Stop() {
		select {
		case <-s.sem.timer.C:
		default:
		}
	}
}

// pauseTimedOut runs on the actor when the pause timer fires: a pause still undecided has
// lasted its maximum wait in time, though the audio that says so did not arrive.
func (s *Session) pauseTimedOut() {
	p := s.sem.pause
	td := s.cfg.TurnDetection
	if p == nil || !s.semanticPauses(td) {
		return
	}
	p.timedOut = true
	if s.decidePause(p, SemanticParams(td.Eagerness), td.Eagerness) {
		s.commitTurn()
	}
}

// closePause ends an undecided pause without a decision: the client committed or cleared the
// buffer itself. The speech segment it held open is closed, as server_vad's was at its stop.
func (s *Session) closePause() {
	if s.sem.pause == nil {
		return
	}
	s.sem.pause = nil
	s.stopPauseTimer()
	if s.inSpeech {
		s.inSpeech = false
		s.send(Event{Epoch: s.epoch, Payload: protocol.InputAudioBufferSpeechStopped{
			AudioEndMs: int(s.inputMs), ItemID: s.speechItemID}})
	}
}

// resumeSpeech drops the pause: the user spoke again, in the same turn.
func (s *Session) resumeSpeech() {
	if s.sem.pause != nil {
		s.sem.pause = nil
		s.stopPauseTimer()
	}
}

// semanticEnd asks for the pause's estimate when it has none yet and reports whether the turn
// ends now; the caller then commits the buffer as server_vad does at speech_stopped. Call it
// after the append was buffered and forwarded.
func (s *Session) semanticEnd() bool {
	p := s.sem.pause
	td := s.cfg.TurnDetection
	if p == nil || !s.semanticPauses(td) {
		return false
	}
	rule := SemanticParams(td.Eagerness)
	if !p.asked && s.inputMs-p.endMs < float64(rule.MaxWaitMs) {
		// (An append that already holds the whole maximum wait ends the turn without asking.)
		s.askEndOfTurn(p)
	}
	return s.decidePause(p, rule, td.Eagerness)
}

// decidePause ends the turn (speech_stopped with the reason) when the estimate, or the pause's
// length, says so.
func (s *Session) decidePause(p *semPause, rule SemanticEndpointing, eagerness string) bool {
	silence := s.inputMs - p.endMs
	if p.timedOut {
		silence = max(silence, p.startSilenceMs+float64(time.Since(p.startedAt))/float64(time.Millisecond))
	}
	reason := ""
	switch {
	case p.scored && p.prob >= rule.Threshold:
		reason = EndOfTurnSemantic
	case p.fallback && silence >= float64(SemanticSilenceMs(eagerness)):
		reason = EndOfTurnSilence
	case silence >= float64(rule.MaxWaitMs) || p.timedOut:
		reason = EndOfTurnMaxWait
	default:
		return false
	}
	info := &protocol.EndOfTurnInfo{Reason: reason, SilenceMs: int(silence)}
	if p.scored {
		prob := p.prob
		info.Probability = &prob
	}
	s.sem.pause = nil
	s.stopPauseTimer()
	s.inSpeech = false
	s.send(Event{Epoch: s.epoch, Payload: protocol.InputAudioBufferSpeechStopped{
		AudioEndMs: int(s.inputMs), ItemID: s.speechItemID, EndOfTurn: info}})
	if m := turnStats(s.engine); m != nil {
		m.MarkInputEnd(s.input, s.m.cfg.WallClock())
	}
	s.log.Debug("semantic_vad end of turn", zap.String("reason", reason), zap.Float64("probability", p.prob),
		zap.Bool("scored", p.scored), zap.Int("silence_ms", int(silence)), zap.String("eagerness", eagerness))
	if o, ok := s.m.cfg.Metrics.(EndOfTurnObserver); ok {
		o.ObserveEndOfTurn(reason, p.prob, p.scored)
	}
	return true
}

// askEndOfTurn starts the pause's estimate, or marks it as having none: the engine cannot
// score, or the ASR has not heard the whole buffer (input kept back during a response).
func (s *Session) askEndOfTurn(p *semPause) {
	if s.sem.asking {
		return // the answer in flight is for an older pause; this one asks when it arrives
	}
	p.asked = true
	est, ok := s.engine.(EndOfTurnEstimator)
	switch {
	case s.engine == nil || !ok:
		s.noEstimate(p, "the engine gives no end-of-turn estimate")
		return
	case s.inputFwd < len(s.inputBuf):
		s.noEstimate(p, "the input has not all reached the engine's ASR (kept back during a response)")
		return
	}
	if s.sem.results == nil {
		s.sem.results = make(chan eotAnswer, 1)
	}
	s.sem.asking = true
	ctx, seq := s.engineCtx, p.seq
	wait := time.Duration(SemanticParams(s.cfg.TurnDetection.Eagerness).MaxWaitMs) * time.Millisecond
	s.sem.wg.Add(1)
	go func() {
		defer s.sem.wg.Done()
		// An answer later than the maximum wait could not change the decision.
		ctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		e, err := est.EndOfTurnProb(ctx)
		s.sem.results <- eotAnswer{seq: seq, e: e, err: err} // cap 1, one in flight: never blocks
	}()
}

func (s *Session) noEstimate(p *semPause, why string) {
	p.fallback = true
	if why != s.sem.noEstimate {
		s.sem.noEstimate = why
		s.log.Info("semantic_vad: no end-of-turn estimate; silence alone ends the turn", zap.String("reason", why))
	}
}

// endOfTurnAnswer applies an estimate on the actor: the pause it was for ends the turn when it
// is high enough; a stale answer lets the current pause ask.
func (s *Session) endOfTurnAnswer(a eotAnswer) {
	s.sem.asking = false
	p := s.sem.pause
	td := s.cfg.TurnDetection
	if p == nil || !s.semanticPauses(td) {
		return
	}
	if a.seq != p.seq {
		if !p.asked {
			s.askEndOfTurn(p)
		}
		return
	}
	if a.err != nil {
		s.noEstimate(p, a.err.Error())
	} else {
		s.sem.noEstimate = ""
		p.scored, p.prob, p.text = true, a.e.Prob, a.e.Text
	}
	if s.decidePause(p, SemanticParams(td.Eagerness), td.Eagerness) {
		s.commitTurn()
	}
}

// commitTurn commits the buffer at the end of a turn the VAD decided, answering it with
// create_response (unless a response still runs: interrupt_response false).
func (s *Session) commitTurn() {
	respond := s.cfg.TurnDetection != nil && s.cfg.TurnDetection.CreateResponse && s.resp == nil && !s.opts.Transcription
	s.handleCommit("", &respond)
}
