package live

import "github.com/omniserve/omniserve/internal/protocol"

// The timeline: milliseconds of input audio since the session started, the one clock of every
// start_ms / end_ms, ack, offset and usage figure Live sends. It advances only with audio, so a
// client that stops streaming freezes it (and its pending acks), as on api.openai.com.

// ackDelayMs is how far past an append's start its context is taken: the ack goes out when
// the timeline reaches start_ms + ackDelayMs (api.openai.com answers 600–960 ms later; omniserve
// queues the context at once and acks it a little later on the same clock).
const ackDelayMs = 200

// usageEveryMs is the period of session.usage.updated on the timeline.
const usageEveryMs = 15000

// timeline counts the input's samples at the session's rate.
type timeline struct {
	rate    int
	samples int64
	// lastUsageMs is the timeline position of the last session.usage.updated (0: none yet).
	lastUsageMs int64
	// pending are the acks not due yet, in the order of their appends (so of their end_ms).
	pending []pendingAck
}

// pendingAck is an append's ack, sent once the timeline reaches endMs.
type pendingAck struct {
	kind, clientEventID string
	startMs, endMs      int64
}

// ms is the timeline's position.
func (tl *timeline) ms() int64 {
	if tl.rate <= 0 {
		return 0
	}
	return tl.samples * 1000 / int64(tl.rate)
}

// seconds is the position in seconds, for usage.
func (tl *timeline) seconds() float64 {
	if tl.rate <= 0 {
		return 0
	}
	return float64(tl.samples) / float64(tl.rate)
}

// ack schedules the ack of an append of kind taken now.
func (tl *timeline) ack(kind, clientEventID string) {
	start := tl.ms()
	tl.pending = append(tl.pending, pendingAck{kind: kind, clientEventID: clientEventID, startMs: start, endMs: start + ackDelayMs})
}

// advance moves the timeline by n samples and returns the acks now due, and whether a usage
// update is due.
func (tl *timeline) advance(n int) (due []protocol.ServerEvent, usage bool) {
	tl.samples += int64(n)
	now := tl.ms()
	i := 0
	for i < len(tl.pending) && tl.pending[i].endMs <= now {
		a := tl.pending[i]
		due = append(due, appendedEvent{kind: a.kind, ClientEventID: a.clientEventID, StartMs: a.startMs, EndMs: a.endMs})
		i++
	}
	tl.pending = tl.pending[i:]
	if now >= tl.lastUsageMs+usageEveryMs {
		tl.lastUsageMs += usageEveryMs * ((now - tl.lastUsageMs) / usageEveryMs)
		usage = true
	}
	return due, usage
}
