package session

import "math"

// playback.ack after response.done. vllm-omni's clients ack whole responses once they are
// over (their examples ack each response's full duration at the end of the turn), so an ack
// may name a response that is no longer active: the session keeps the last few that ended
// (responses.finished) and acknowledges against them, and with ack_only (vllm-omni's
// playback_commit_policy) the history keeps only the text of the audio the client committed.

// finishedAudio is a response that ended, as a later playback.ack may name it.
type finishedAudio struct {
	id, itemID string
	sentMs     float64 // the audio the client was sent
}

// keptFinished bounds responses.finished: a client acks the responses of the turn it just heard.
const keptFinished = 8

// keepFinished records r, which just ended.
func (rs *responses) keepFinished(r *response) {
	if len(rs.finished) == keptFinished {
		rs.finished = append(rs.finished[:0], rs.finished[1:]...)
	}
	rs.finished = append(rs.finished, finishedAudio{id: r.id, itemID: r.itemID, sentMs: r.play.sentMs})
}

// namesItem reports whether an ack's item_id names the item itemID of response responseID:
// its id, or item_<response_id>, the id vllm-omni's clients build.
func namesItem(given, responseID, itemID string) bool {
	return given == itemID || given == "item_"+responseID
}

// committedMs is what ack c commits of the audio, played ms of it played: committed_ms,
// at most what was played; the played part when absent.
func committedMs(c *PlaybackAck, played float64) int {
	if c.CommittedMs != nil && float64(*c.CommittedMs) < played {
		return max(*c.CommittedMs, 0)
	}
	return int(played)
}

// findFinished is the latest ended response ack c names (by response_id, item_id, or the last
// one when it names none).
func (rs *responses) findFinished(c *PlaybackAck) (finishedAudio, bool) {
	for i := len(rs.finished) - 1; i >= 0; i-- {
		f := rs.finished[i]
		if (c.ResponseID == "" || c.ResponseID == f.id) && (c.ItemID == "" || namesItem(c.ItemID, f.id, f.itemID)) {
			return f, true
		}
	}
	return finishedAudio{}, false
}

// finishedAck is playback.ack c of a response that ended: acknowledged against what it sent;
// the item is cut with truncate, or under ack_only where less than it sent was committed (1 ms
// of slack: clients report whole milliseconds of what they played).
func (rs *responses) finishedAck(c *PlaybackAck, conv *conversation, epoch int) []Event {
	f, ok := rs.findFinished(c)
	if !ok {
		return []Event{errorEvent(epoch, "playback_item_not_found", "no response matches this playback.ack", c.ID, "response_id")}
	}
	played := math.Min(float64(c.PlayedMs), f.sentMs)
	committed := committedMs(c, played)
	at := played
	cut := c.Truncate
	if c.AckOnly && float64(committed)+1 < f.sentMs {
		at, cut = float64(committed), true
	}
	evs := []Event{{Epoch: epoch, Effect: PlaybackAcknowledged{ResponseID: f.id, ItemID: f.itemID,
		PlayedMs: int(played), SentMs: int(f.sentMs), CommittedMs: committed, Truncated: cut}}}
	if cut {
		evs = append(evs, rs.truncate(conv, epoch, c.ID, f.itemID, 0, at)...)
	}
	return evs
}
