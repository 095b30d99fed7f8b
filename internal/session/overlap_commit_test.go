package session

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// A commit during a response is an acknowledgement when the speech over it was short (up to
// overlap_short_ack_ms), a turn of its own answered after the response when longer; without a
// response, without speech over it, or without the dialect's tiers it is a commit as always.
func TestCommitTier(t *testing.T) {
	tiers := overlapCommit{tiers: true, active: true, streamed: true, discards: true}
	with := func(f func(*overlapCommit)) overlapCommit { c := tiers; f(&c); return c }
	tests := []struct {
		name string
		c    overlapCommit
		want overlapTier
	}{
		{"a short remark: an acknowledgement", with(func(c *overlapCommit) { c.overlapMs = 400 }), tierAck},
		{"exactly overlap_short_ack_ms: still one", with(func(c *overlapCommit) { c.overlapMs = OverlapShortAckMs }), tierAck},
		{"longer: answered after the response", with(func(c *overlapCommit) { c.overlapMs = OverlapShortAckMs + 100 }), tierDeferred},
		{"nothing said over the response: as always", with(func(c *overlapCommit) { c.overlapMs = 0 }), tierTurn},
		{"no response runs", with(func(c *overlapCommit) { c.overlapMs, c.active = 400, false }), tierTurn},
		{"plain realtime: no tiers", with(func(c *overlapCommit) { c.overlapMs, c.tiers = 400, false }), tierTurn},
		{"an engine that cannot forget the audio: a turn", with(func(c *overlapCommit) { c.overlapMs, c.discards = 400, false }), tierDeferred},
		{"audio kept for the commit (no auto_response): a turn", with(func(c *overlapCommit) { c.overlapMs, c.streamed = 400, false }), tierDeferred},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, commitTier(tc.c))
		})
	}
}

// discardRecorder is an engine that can forget its uncommitted audio, counting the calls.
type discardRecorder struct{ calls int }

func (d *discardRecorder) DiscardAudio(context.Context) error { d.calls++; return nil }

// An acknowledgement closes the announced speech, clears the input, has the engine forget the
// audio (a queued job, after earlier engine work), and commits an empty user item with the
// speech's id whose committed event says: empty, an acknowledgement, no response.
func TestAckCommit(t *testing.T) {
	conv := &conversation{}
	in := &inputAudio{speechItemID: "item_mhm", overlapSpeechMs: 300}
	eng := &discardRecorder{}
	it, acts := ackCommit(conv, in, eng, "evt_1", 2, 10)
	require.Equal(t, "item_mhm", it.ID, "the item speech_started announced")
	require.NotNil(t, conv.find(it.ID), "the empty user item joins the conversation")
	require.Empty(t, it.Text)
	require.Empty(t, in.speechItemID, "taken")
	require.Zero(t, in.overlapSpeechMs)

	var kinds []string
	var committed *InputCommitted
	for _, a := range acts {
		switch a := a.(type) {
		case emit:
			for _, ev := range a.evs {
				if c, ok := ev.Effect.(InputCommitted); ok {
					committed = &c
					require.Equal(t, 2, ev.Epoch)
				}
			}
			kinds = append(kinds, "emit")
		case clearInput:
			require.Equal(t, "evt_1", a.eventID)
			kinds = append(kinds, "clear")
		case queueJob:
			res := a.job.run(context.Background())
			require.NoError(t, res.err)
			require.Empty(t, res.responseID, "no response for it")
			require.Len(t, a.full, 1, "a full queue is told")
			kinds = append(kinds, "job")
		case trimHistory:
			kinds = append(kinds, "trim")
		}
	}
	require.Equal(t, []string{"emit", "clear", "job", "emit", "trim"}, kinds)
	require.Equal(t, 1, eng.calls, "the engine forgets the acknowledgement's audio")
	require.NotNil(t, committed)
	require.Equal(t, InputCommitted{PreviousItemID: committed.PreviousItemID, ItemID: "item_mhm", Empty: true, NoResponse: true, OverlapAck: true}, *committed)
}

// The speech over a response is summed over its runs (a pause between two remarks does not
// restart it, unlike the barge-in's continuous measure); it is forgotten when no response runs
// and when a response begins.
func TestOverlapSpeechSums(t *testing.T) {
	in := &inputAudio{}
	voiced, quiet := vadResult{voiced: true}, vadResult{}
	require.EqualValues(t, 100, in.overlap(voiced, true, 100))
	require.EqualValues(t, 200, in.overlap(voiced, true, 100))
	require.Zero(t, in.overlap(quiet, true, 100), "the barge-in's run restarts")
	require.EqualValues(t, 100, in.overlap(voiced, true, 100))
	require.EqualValues(t, 300, in.overlapSpeechMs, "every run since the commit")
	in.overlap(voiced, false, 100)
	require.Zero(t, in.overlapSpeechMs, "no response: nothing overlaps")
	in.overlap(voiced, true, 100)
	in.resetVAD(0)
	require.Zero(t, in.overlapSpeechMs, "a new response")
}
