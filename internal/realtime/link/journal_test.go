package link

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func frameOf(seq int64, size int) []byte {
	b := []byte(fmt.Sprintf("%08d", seq))
	for len(b) < size {
		b = append(b, '.')
	}
	return b
}

func seqsOf(t *testing.T, frames [][]byte) []int64 {
	t.Helper()
	var out []int64
	for _, f := range frames {
		var n int64
		_, err := fmt.Sscanf(string(f[:8]), "%d", &n)
		require.NoError(t, err)
		out = append(out, n)
	}
	return out
}

func TestJournalReplayFromSeq(t *testing.T) {
	j := NewJournal(1<<20, 100)
	for s := int64(1); s <= 10; s++ {
		j.add(s, frameOf(s, 10))
	}
	tests := []struct {
		name     string
		after    int64
		want     []int64
		complete bool
	}{
		{"from the start", 0, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, true},
		{"middle", 7, []int64{8, 9, 10}, true},
		{"everything received", 10, nil, true},
		{"ahead of the server", 12, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			frames, complete := j.since(tc.after)
			require.Equal(t, tc.complete, complete)
			require.Equal(t, tc.want, seqsOf(t, frames))
		})
	}
}

func TestJournalBounds(t *testing.T) {
	tests := []struct {
		name              string
		maxBytes, maxEvts int
		size              int
		adds              int64
		wantLen           int
		wantFirst         int64
	}{
		{"event bound", 1 << 20, 4, 10, 10, 4, 7},
		{"byte bound", 35, 100, 10, 10, 3, 8},
		{"both, bytes first", 50, 8, 10, 20, 5, 16},
		{"both, events first", 1000, 3, 10, 20, 3, 18},
		{"frame larger than the byte bound", 5, 100, 10, 4, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := NewJournal(tc.maxBytes, tc.maxEvts)
			for s := int64(1); s <= tc.adds; s++ {
				j.add(s, frameOf(s, tc.size))
				require.LessOrEqual(t, j.size(), tc.maxBytes)
				require.LessOrEqual(t, j.len(), tc.maxEvts)
			}
			require.Equal(t, tc.wantLen, j.len())
			require.Equal(t, tc.wantFirst, j.first())
			require.Equal(t, tc.wantLen*tc.size, j.size())
			// Replay from before the oldest held event is refused, never silently short.
			_, complete := j.since(0)
			require.False(t, complete)
			frames, complete := j.since(tc.adds - 1)
			if tc.wantLen > 0 {
				require.True(t, complete)
				require.Equal(t, []int64{tc.adds}, seqsOf(t, frames))
			} else {
				require.False(t, complete, "the last event itself was too large to keep")
			}
			_, complete = j.since(tc.adds)
			require.True(t, complete, "nothing missed")
		})
	}
}

func TestJournalRingWrapsInOrder(t *testing.T) {
	j := NewJournal(1<<20, 5)
	for s := int64(1); s <= 1000; s++ {
		j.add(s, frameOf(s, 9))
		frames, complete := j.since(max(s-3, 0))
		require.True(t, complete)
		want := []int64{}
		for x := max(s-2, 1); x <= s; x++ {
			want = append(want, x)
		}
		require.Equal(t, want, seqsOf(t, frames))
	}
	require.Equal(t, 5, len(j.entries), "the ring never grows past the event bound")
}

// An acknowledged event leaves the journal (session.event_ack): a resume from the ack's cursor
// still replays everything after it, one from before it is a gap.
func TestJournalTrimByAck(t *testing.T) {
	tests := []struct {
		name      string
		ack       int64
		wantLen   int
		resumeAt  int64
		want      []int64
		complete  bool
		wantFirst int64
	}{
		{"nothing acked", 0, 10, 0, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, true, 1},
		{"half acked", 5, 5, 5, []int64{6, 7, 8, 9, 10}, true, 6},
		{"resume from before the ack", 5, 5, 3, nil, false, 6},
		{"all acked", 10, 0, 10, nil, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := NewJournal(1<<20, 100)
			for s := int64(1); s <= 10; s++ {
				j.add(s, frameOf(s, 10))
			}
			j.trim(tc.ack)
			require.Equal(t, tc.wantLen, j.len())
			require.Equal(t, tc.wantLen*10, j.size())
			require.Equal(t, tc.wantFirst, j.first())
			frames, complete := j.since(tc.resumeAt)
			require.Equal(t, tc.complete, complete)
			require.Equal(t, tc.want, seqsOf(t, frames))
		})
	}
}

func TestStreamAck(t *testing.T) {
	st := NewStream(false, NewJournal(1<<20, 100))
	for range 4 {
		_, err := st.Stamp(Event{Type: "session.heartbeat_ack", Fields: map[string]any{}})
		require.NoError(t, err)
	}
	require.ErrorIs(t, st.Ack(5), ErrBadAck, "beyond the newest event")
	require.ErrorIs(t, st.Ack(-1), ErrBadAck)
	n, _ := st.JournalStats()
	require.Equal(t, 4, n, "a refused ack trims nothing")
	require.NoError(t, st.Ack(3))
	n, _ = st.JournalStats()
	require.Equal(t, 1, n)
	require.NoError(t, NewStream(false, nil).Ack(0), "no journal: nothing to trim")
}
