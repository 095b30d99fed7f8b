package stage

import (
	"go.uber.org/zap"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/duplex"
)

// semantic_vad on an auto-response stream: a pause of the eagerness's minimum silence does not
// end the turn at once. The stream scores the ASR's partial transcript with the thinker's
// end-of-turn estimate (duplex_eot.go, a job on the sequence goroutine in order with prefills)
// and ends the turn when P ≥ the threshold, or when the pause reaches the maximum wait; speech
// resuming in the pause continues the same turn. Silence is counted in input audio. Without an
// estimate (pipeline.thinker.end_of_turn off, or auto on a dummy model; a remote thinker or ASR)
// the pause ends the turn on the eagerness's silence window alone. The session's conversation
// path (internal/session semvad.go) reads the same table.

// semPause is an undecided pause of a semantic_vad stream (guarded by audioMu).
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
	_, partial := asr.(interface{ Partial() string })
	return rule, true, !remoteThinker && partial && p.endOfTurnOff() == ""
}

// beginSemPause starts a pause whose speech ended at endMs: the partial transcript is queued
// for its estimate now, in order with the stream's jobs. Called with audioMu held.
func (d *DuplexStream) beginSemPause(endMs int64) {
	p := &semPause{endMs: endMs, fallback: true}
	d.sem = p
	if !d.semAsk {
		return
	}
	pa, _ := d.audio.asr.(interface{ Partial() string })
	j := &eotJob{text: pa.Partial(), res: make(chan eotResult, 1)}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.isClosed() {
		return
	}
	select {
	case d.jobs <- seqJob{eot: j}:
		p.job, p.fallback = j, false
	default:
		d.p.log.Debug("semantic_vad: no end-of-turn estimate, the stream's queue is full")
	}
}

// decideSemPause reports the pause's decision once its estimate or its length says the turn
// ends (nil: keep listening). nowMs is the stream's input position in VAD ms.
func (d *DuplexStream) decideSemPause(nowMs int64) *duplex.EndOfTurnDecision {
	p := d.sem
	if p == nil {
		return nil
	}
	if p.job != nil {
		select {
		case r := <-p.job.res:
			p.job = nil
			if r.err != nil {
				p.fallback = true
				d.p.log.Debug("semantic_vad: no end-of-turn estimate; silence alone ends the turn", zap.Error(r.err))
			} else {
				p.scored, p.prob = true, r.e.Prob
			}
		default:
		}
	}
	silence := int(nowMs - p.endMs)
	dec := &duplex.EndOfTurnDecision{Prob: p.prob, Scored: p.scored, SilenceMs: silence}
	switch {
	case p.scored && p.prob >= d.semRule.Threshold:
		dec.Reason = duplex.EndOfTurnSemantic
	case p.fallback && silence >= d.semRule.SilenceMs:
		dec.Reason = duplex.EndOfTurnSilence
	case silence >= d.semRule.MaxWaitMs:
		dec.Reason = duplex.EndOfTurnMaxWait
	default:
		return nil
	}
	d.sem = nil
	return dec
}

// streamMs is a stream position in samples as VAD ms.
func streamMs(samples int64) int64 { return samples * 1000 / audio.ASRSampleRate }
