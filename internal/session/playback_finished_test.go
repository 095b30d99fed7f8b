package session

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// playback.ack after response.done: the ended response is found by response_id, by item_id
// (its own or item_<response_id>) or as the last one; played is clipped to what was sent;
// ack_only cuts what was not committed.
func TestFinishedAck(t *testing.T) {
	committed := func(n int) *int { return &n }
	tests := []struct {
		name      string
		ack       PlaybackAck
		wantResp  string
		played    int
		committed int
		cut       bool
		code      string
	}{
		{"by response_id", PlaybackAck{PlayedMs: 1500, ResponseID: "r1"}, "r1", 1000, 1000, false, ""},
		{"by item_<response_id>", PlaybackAck{PlayedMs: 2000, ItemID: "item_r2"}, "r2", 1999, 1999, false, ""},
		{"by its item id", PlaybackAck{PlayedMs: 500, ItemID: "it1"}, "r1", 500, 500, false, ""},
		{"the last one", PlaybackAck{PlayedMs: 100}, "r2", 100, 100, false, ""},
		{"commit_all_on_done keeps the text", PlaybackAck{PlayedMs: 2000, ResponseID: "r2", CommittedMs: committed(700)}, "r2", 1999, 700, false, ""},
		{"ack_only cuts at committed_ms", PlaybackAck{PlayedMs: 2000, ResponseID: "r2", CommittedMs: committed(700), AckOnly: true}, "r2", 1999, 700, true, ""},
		{"ack_only, all committed (whole ms)", PlaybackAck{PlayedMs: 1999, ResponseID: "r2", AckOnly: true}, "r2", 1999, 1999, false, ""},
		{"truncate", PlaybackAck{PlayedMs: 400, ResponseID: "r1", Truncate: true}, "r1", 400, 400, true, ""},
		{"unknown response", PlaybackAck{PlayedMs: 1, ResponseID: "nope"}, "", 0, 0, false, "playback_item_not_found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conv := &conversation{}
			rs := newResponses("s", 0)
			for _, r := range []*response{{id: "r1", itemID: "it1", play: playback{sentMs: 1000}}, {id: "r2", itemID: "it2", play: playback{sentMs: 1999.6}}} {
				conv.insert(&item{ID: r.itemID, Role: "assistant", Type: "message", Audio: true, AudioMs: r.play.sentMs, Text: "hello"}, "")
				rs.resp = r
				rs.end()
			}
			evs := rs.playbackAck(&tc.ack, conv, 0)
			if tc.code != "" {
				require.Equal(t, tc.code, evs[0].Effect.(Error).Code)
				return
			}
			a := evs[0].Effect.(PlaybackAcknowledged)
			require.Equal(t, tc.wantResp, a.ResponseID)
			require.Equal(t, tc.played, a.PlayedMs)
			require.Equal(t, tc.committed, a.CommittedMs)
			require.Equal(t, tc.cut, a.Truncated)
			require.Len(t, evs, map[bool]int{true: 2, false: 1}[tc.cut])
			it := conv.find(a.ItemID)
			require.Equal(t, tc.cut, it.Truncated)
		})
	}
}

// Only the last keptFinished responses are kept.
func TestKeepFinishedIsBounded(t *testing.T) {
	rs := newResponses("s", 0)
	for i := range 3 * keptFinished {
		rs.resp = &response{id: string(rune('a' + i))}
		rs.end()
	}
	require.Len(t, rs.finished, keptFinished)
}
