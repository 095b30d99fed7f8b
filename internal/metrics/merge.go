package metrics

// merger folds the segments of one stage into one row with the merge rules of stageFields
// (vllm-omni's collapse at finalize). It keeps the running tpot weight that vllm-omni
// stores in the private `_vllm_tpot_weight` / `_vllm_tpot_weighted_ms` keys, so folding
// incrementally (as pending snapshots arrive, which keeps their memory O(stages)) gives the same
// result as folding a stored list at finalize.
// The zero value is ready to use; it is not safe for concurrent use.
type merger struct {
	cur      StageRequestStats
	next     StageRequestStats // the segment being folded: read through &mg.next, so Add's argument never escapes (no allocation per segment)
	n        int
	tpotW    float64
	tpotWSum float64
}

// len is the number of segments folded so far.
func (mg *merger) len() int { return mg.n }

// add folds e into the running row. e is deep-copied on first use and its lists are copied on
// concatenation, so the caller keeps ownership of e.
func (mg *merger) add(e StageRequestStats) {
	if mg.n == 0 {
		mg.cur = e.clone()
		mg.n = 1
		mg.tpotW, mg.tpotWSum = 0, 0
		if e.VllmTpotMs > 0 {
			mg.tpotW = tpotWeight(e.NumTokensOut)
			mg.tpotWSum = e.VllmTpotMs * mg.tpotW
		}
		return
	}
	mg.n++
	cur := &mg.cur
	mg.next = e
	defer func() { mg.next = StageRequestStats{} }() // keep no references to the caller's lists
	ep := &mg.next
	prevOut := cur.NumTokensOut
	// Pass 1: every rule that reads only this field.
	for i := range stageFields {
		fd := &stageFields[i]
		switch fd.merge {
		case mergeSum:
			if fd.kind == kindInt {
				*fd.i(cur) += *fd.i(ep)
			} else {
				*fd.f(cur) += *fd.f(ep)
			}
		case mergeFirstPositive:
			if fd.kind == kindInt {
				if *fd.i(cur) <= 0 && *fd.i(ep) > 0 {
					*fd.i(cur) = *fd.i(ep)
				}
			} else if *fd.f(cur) <= 0 && *fd.f(ep) > 0 {
				*fd.f(cur) = *fd.f(ep)
			}
		case mergeLastPositive:
			if *fd.f(ep) > 0 {
				*fd.f(cur) = *fd.f(ep)
			}
		case mergeLastNonEmpty:
			if v := *fd.s(ep); v != "" {
				*fd.s(cur) = v
			}
		case mergeConcat:
			if src := *fd.l(ep); len(src) > 0 {
				*fd.l(cur) = append(*fd.l(cur), src...)
			}
		case mergeTokenWeighted:
			mg.mergeTpot(prevOut, ep)
		case mergeKeepFirst, mergeMeanOfList, mergeRecomputeTPOU, mergeUnset:
			// derived rules run in pass 2; keep-first needs nothing
		}
	}
	// Pass 2: fields derived from merged values.
	for i := range stageFields {
		fd := &stageFields[i]
		switch fd.merge {
		case mergeMeanOfList:
			*fd.f(cur) = mean(*stageFields[fd.meanOf].l(cur))
		case mergeRecomputeTPOU:
			// The time per output unit after the first: the mean gap between consecutive
			// outputs. vllm-omni divided generation time minus a first-output figure from
			// another clock by units-1; the gaps are what the name says (docs/STATS.md).
			cur.TimePerOutputUnitMs = mean(cur.InterOutputLatenciesMs)
		default:
		}
	}
}

func (mg *merger) mergeTpot(prevOut int, e *StageRequestStats) {
	cur := &mg.cur
	if mg.tpotW == 0 && cur.VllmTpotMs > 0 {
		// The running row came from outside this Merger's history: rebuild its weight from the
		// tokens it carried before e was summed in (vllm-omni's prev_tokens).
		mg.tpotW = tpotWeight(prevOut)
		mg.tpotWSum = cur.VllmTpotMs * mg.tpotW
	}
	if e.VllmTpotMs > 0 {
		w := tpotWeight(e.NumTokensOut)
		mg.tpotW += w
		mg.tpotWSum += e.VllmTpotMs * w
	}
	if mg.tpotW > 0 {
		cur.VllmTpotMs = mg.tpotWSum / mg.tpotW
	}
}

// result is the merged row. It shares lists with the Merger: do not Add after using it unless
// you Clone it first.
func (mg *merger) result() StageRequestStats { return mg.cur }

// mergeStageStats folds next into cur with the merge table. cur's tpot weight is
// rebuilt from its token count, as vllm-omni does when no running weight is known.
func mergeStageStats(cur, next StageRequestStats) StageRequestStats {
	mg := merger{cur: cur.clone(), n: 1}
	mg.add(next)
	return mg.result()
}

// tpotWeight is the number of inter-token gaps a segment's tpot averages over, at least 1.
func tpotWeight(out int) float64 {
	return float64(max(out-1, 1))
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
