package stage

import (
	"github.com/omniserve/omniserve/internal/duplex"
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
)

// semantic_vad on an auto-response stream: a pause of the eagerness's minimum silence does not
// end the turn at once. The stream scores the ASR's partial transcript with the thinker's
// end-of-turn estimate (duplex_eot.go, a job on the sequence goroutine in order with prefills)
// and ends the turn when P ≥ the threshold, or when the pause reaches the maximum wait; speech
// resuming in the pause continues the same turn. Silence is counted in input audio. Without an
// estimate (pipeline.thinker.end_of_turn off, or auto on a dummy model; a remote thinker or ASR)
// the pause ends the turn on the eagerness's silence window alone. The session's conversation
// path (internal/session semvad.go) reads the same table.

// semPause is an undecided pause of a semantic_vad stream (guarded by the ear's lock).
type semPause struct {
	endMs int64   // VAD ms where the speech ended
	job   *eotJob // the estimate in flight; nil once answered or without one
	// fallback: no estimate (its failure, or none to ask); the silence window decides.
	fallback bool
	scored   bool
	prob     float64
}

// semanticMode returns the stream's semantic_vad rule, whether semantic_vad endpoints it (on)
// and whether the thinker is asked (ask false: silence windows). It is fixed when the stream opens.
func (p *Pipeline) semanticMode(opts DuplexOptions, remoteThinker bool, asr asrStream) (rule duplex.SemanticEndpointing, on, ask bool) { //nolint:gocritic // three results read best named
	if !opts.AutoResponse || opts.Turn.Type != duplex.TurnSemanticVAD {
		return duplex.SemanticEndpointing{}, false, false
	}
	rule = duplex.SemanticParams(opts.Turn.Eagerness)
	_, partial := asr.(partialASR)
	return rule, true, !remoteThinker && partial && p.endOfTurnOff() == ""
}

// beginPause starts a pause whose speech ended at endMs: silence alone decides it unless the
// thinker is asked, and then ask is set and text is the partial transcript to score (queued by
// the stream, awaitEstimate).
func (e *ear) beginPause(endMs int64) (text string, ask bool) {
	e.sem = &semPause{endMs: endMs, fallback: true}
	if !e.semAsk {
		return "", false
	}
	return e.asr.(partialASR).Partial(), true
}

// awaitEstimate makes the pause wait for the estimate j (nil: none was queued, silence alone
// decides).
func (e *ear) awaitEstimate(j *eotJob) {
	if j == nil || e.sem == nil {
		return
	}
	e.sem.job, e.sem.fallback = j, false
}

// decidePause reports the pause's decision, and where its speech ended, once its estimate or
// its length says the turn ends (nil: keep listening). nowMs is the stream's input position in
// VAD ms.
func (e *ear) decidePause(nowMs int64) (endMs int64, dec *duplex.EndOfTurnDecision) {
	p := e.sem
	if p == nil {
		return 0, nil
	}
	e.collectEstimate()
	dec = decidePause(p, e.semRule, int(nowMs-p.endMs))
	if dec != nil {
		e.sem = nil
	}
	return p.endMs, dec
}

// collectEstimate takes the pause's estimate if it has come: a failed one leaves the silence
// window to decide.
func (e *ear) collectEstimate() {
	p := e.sem
	if p.job == nil {
		return
	}
	select {
	case r := <-p.job.res:
		p.job = nil
		if r.err != nil {
			p.fallback = true
			e.log.Debug("semantic_vad: no end-of-turn estimate; silence alone ends the turn", zap.Error(r.err))
		} else {
			p.scored, p.prob = true, r.e.Prob
		}
	default:
	}
}

// decidePause is rule's decision on pause p after silenceMs of it (nil: undecided).
func decidePause(p *semPause, rule duplex.SemanticEndpointing, silenceMs int) *duplex.EndOfTurnDecision {
	dec := &duplex.EndOfTurnDecision{Prob: p.prob, Scored: p.scored, SilenceMs: silenceMs}
	switch {
	case p.scored && p.prob >= rule.Threshold:
		dec.Reason = duplex.EndOfTurnSemantic
	case p.fallback && silenceMs >= rule.SilenceMs:
		dec.Reason = duplex.EndOfTurnSilence
	case silenceMs >= rule.MaxWaitMs:
		dec.Reason = duplex.EndOfTurnMaxWait
	default:
		return nil
	}
	return dec
}

// streamMs is a stream position in samples as VAD ms.
func streamMs(samples int64) int64 { return samples * 1000 / audio.ASRSampleRate }
