package session

import (
	"slices"
	"strings"
)

// transcripts is a session's live input transcript deltas (a transcription session's, or a
// conversation's with input transcription on): what was sent of each
// utterance's transcript, and the utterance ends (cuts) the engine's outputs have not reached
// yet. The engine's outputs lag the session: a delta belongs to the first cut still ahead of it
// (a committed item, or discarded audio), not to whatever the session has open now; once an
// item's final transcript went out its late deltas are stale. It sends nothing: the session
// sends what its methods return.
type transcripts struct {
	// deltas is the deltas sent per item, until the item's final transcript.
	deltas map[string]*transcriptDeltas
	// cuts are the utterance ends the engine's outputs have not reached yet, in order: a
	// committed item's id (until its Transcript output) or "" for a discard (until its mark).
	// Deltas still on their way belong to the first.
	cuts []string
	// times is each committed item's delta timing for its statistics record
	// (transcription.go), until the item ends (taken by timing).
	times map[string]*itemTimes
	// open are a transcription session's committed items whose statistics record is not
	// written yet (transcription.go), in commit order: at most the engine jobs queued.
	open []string
}

// opened notes a transcription session's committed item: it is recorded once it ends, as
// completed, failed or (transcriber.cancelOpen) cancelled.
func (x *transcripts) opened(itemID string) { x.open = append(x.open, itemID) }

// closed forgets an open item and reports whether it was open (committed and not recorded).
func (x *transcripts) closed(itemID string) bool {
	i := slices.Index(x.open, itemID)
	if i < 0 {
		return false
	}
	x.open = slices.Delete(x.open, i, i+1)
	return true
}

// itemTimes is what an item's statistics record needs of its deltas.
type itemTimes struct {
	first  float64 // wall time of the first delta sent; 0 = none
	deltas int     // delta events sent
}

// sent records a delta event sent for itemID at wall time now.
func (x *transcripts) sent(itemID string, now float64) {
	if x.times == nil {
		x.times = map[string]*itemTimes{}
	}
	t := x.times[itemID]
	if t == nil {
		t = &itemTimes{first: now}
		x.times[itemID] = t
	}
	t.deltas++
}

// timing takes the item's delta timing (zero when it had no delta) and forgets it.
func (x *transcripts) timing(itemID string) itemTimes {
	t := x.times[itemID]
	delete(x.times, itemID)
	if t == nil {
		return itemTimes{}
	}
	return *t
}

// transcriptDeltas is what the session has sent of one item's transcript.
type transcriptDeltas struct {
	sent  string
	final bool // the final transcript went out: later deltas of the item are stale
	// replay is what a reopened engine stream, which decodes the utterance again from its
	// start, has yet to repeat of sent: those words are not sent twice.
	replay string
	// diverged: the reopened stream's words differ from those sent; the item's deltas wait
	// for its final transcript (finish).
	diverged bool
}

// ahead is the utterance end the next delta belongs to: the first cut (an item id, or "" for
// discarded audio), and false when there is none (the delta is the open utterance's).
func (x *transcripts) ahead() (itemID string, ok bool) {
	if len(x.cuts) == 0 {
		return "", false
	}
	return x.cuts[0], true
}

// add records text for itemID and returns what of it to send: "" when it is stale (the item's
// final went out) or a reopened stream's repeat of words already sent.
func (x *transcripts) add(itemID, text string) string {
	if x.deltas == nil {
		x.deltas = map[string]*transcriptDeltas{}
	}
	d := x.deltas[itemID]
	if d == nil {
		d = &transcriptDeltas{}
		x.deltas[itemID] = d
	}
	if d.final || d.diverged {
		return ""
	}
	if d.replay != "" {
		switch {
		case strings.HasPrefix(d.replay, text):
			d.replay = d.replay[len(text):]
			return ""
		case strings.HasPrefix(text, d.replay):
			text = text[len(d.replay):]
			d.replay = ""
		default:
			d.diverged = true
			return ""
		}
	}
	d.sent += text
	return text
}

// reopened: the engine stream was replaced before its first commit (engineLink.stale, handleUpdate) and
// the new one decodes the buffered audio again, so the open utterance's words come again from
// its start. The old stream's utterance ends went with it (its outputs were all routed).
func (x *transcripts) reopened(openItem string) {
	x.cuts = nil
	if d := x.deltas[openItem]; d != nil && !d.final {
		d.replay = d.sent
	}
}

// cut records an utterance end sent to the engine: the committed item's id, or "" for a
// discard.
func (x *transcripts) cut(itemID string) { x.cuts = append(x.cuts, itemID) }

// reached takes an utterance end off cuts: the first one, once the engine's outputs reached it
// (a Transcript output for an item, a discard's mark for ""), or a failed commit's item
// wherever it is (it has no output).
func (x *transcripts) reached(itemID string, failed bool) {
	for i, id := range x.cuts {
		if id == itemID {
			x.cuts = slices.Delete(x.cuts, i, i+1)
			break
		}
		if !failed {
			break
		}
	}
	if d := x.deltas[itemID]; itemID != "" && (failed || d != nil && d.final) {
		delete(x.deltas, itemID)
	}
}

// transcriptArrived: the engine's Transcript output arrived, so the outputs are past every
// discard before the first item (their marks were lost) and past that item.
func (x *transcripts) transcriptArrived() {
	for len(x.cuts) > 0 && x.cuts[0] == "" {
		x.reached("", false)
	}
	if len(x.cuts) > 0 {
		x.reached(x.cuts[0], false)
	}
}

// drop forgets the deltas of an utterance whose audio was discarded.
func (x *transcripts) drop(itemID string) {
	delete(x.deltas, itemID)
	delete(x.times, itemID)
}

// finish is the rest of the item's final transcript to send as its last delta, so that the
// deltas concatenate to it ("" = nothing to send); when the final pass revised words already
// sent, the deltas stop where they are and completed carries the final text (clients replace
// on completed). An item with no delta gets its whole transcript as one.
func (x *transcripts) finish(itemID, final string) string {
	sent := ""
	if d := x.deltas[itemID]; d != nil {
		sent = d.sent
	}
	if slices.Contains(x.cuts, itemID) {
		// Deltas of it may still be on their way (ahead of its Transcript output): stale.
		if x.deltas == nil {
			x.deltas = map[string]*transcriptDeltas{}
		}
		x.deltas[itemID] = &transcriptDeltas{final: true}
	} else {
		delete(x.deltas, itemID)
	}
	if !strings.HasPrefix(final, sent) {
		return ""
	}
	return final[len(sent):]
}
