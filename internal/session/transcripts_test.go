package session

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// transcripts follows the engine's order: each step is one thing that happens, and what the
// session would send for it.
func TestTranscripts(t *testing.T) {
	type step struct {
		op   string // delta (to the open item "open"), cut, reached, failed, arrived, drop, finish
		id   string
		text string
		want string // delta: the item it is sent to ("" = not sent); finish: the rest sent
		sent string // delta: the text sent, when it is not all of text
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"open utterance, then its final", []step{
			{op: "delta", text: "go", want: "open"},
			{op: "delta", text: " forward", want: "open"},
			{op: "finish", id: "open", text: "go forward ten", want: " ten"},
		}},
		{"late deltas belong to the committed item", []step{
			{op: "cut", id: "i1"},
			{op: "delta", text: "go", want: "i1"},
			{op: "finish", id: "i1", text: "go on", want: " on"},
			{op: "delta", text: " on", want: ""}, // stale: the final went out
			{op: "arrived"},
			{op: "delta", text: "next", want: "open"},
		}},
		{"deltas of discarded audio are dropped until its mark", []step{
			{op: "cut", id: ""},
			{op: "delta", text: "turn", want: ""},
			{op: "reached", id: ""},
			{op: "delta", text: "left", want: "open"},
		}},
		{"a lost discard mark is passed by the next transcript", []step{
			{op: "cut", id: ""},
			{op: "cut", id: "i2"},
			{op: "arrived"},
			{op: "delta", text: "x", want: "open"},
		}},
		{"a failed commit leaves the cuts wherever it is", []step{
			{op: "cut", id: "i1"},
			{op: "cut", id: "i2"},
			{op: "failed", id: "i2"},
			{op: "delta", text: "a", want: "i1"},
			{op: "arrived"},
			{op: "delta", text: "b", want: "open"},
		}},
		{"a revised final sends no rest", []step{
			{op: "delta", text: "go fore", want: "open"},
			{op: "finish", id: "open", text: "goal four", want: ""},
		}},
		{"an item without deltas gets its whole transcript", []step{
			{op: "finish", id: "i9", text: "hello", want: "hello"},
		}},
		{"a reopened stream's outputs are past the old stream's cuts", []step{
			{op: "cut", id: ""},
			{op: "reopened", id: "open"},
			{op: "delta", text: "x", want: "open"},
		}},
		{"a reopened stream's repeat is not sent twice", []step{
			{op: "delta", text: "go", want: "open"},
			{op: "delta", text: " for", want: "open"},
			{op: "reopened", id: "open"},
			{op: "delta", text: "go", want: ""},                                 // repeated
			{op: "delta", text: " forward ten", want: "open", sent: "ward ten"}, // the new words only
			{op: "finish", id: "open", text: "go forward ten", want: ""},
		}},
		{"a reopened stream that hears otherwise stops the deltas until the final", []step{
			{op: "delta", text: "go for", want: "open"},
			{op: "reopened", id: "open"},
			{op: "delta", text: "goal", want: ""},
			{op: "delta", text: " four", want: ""},
			{op: "finish", id: "open", text: "go forward", want: "ward"},
		}},
		{"dropped deltas do not prefix the next final", []step{
			{op: "delta", text: "turn", want: "open"},
			{op: "drop", id: "open"},
			{op: "finish", id: "open", text: "stop", want: "stop"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var x transcripts
			for i, st := range tc.steps {
				switch st.op {
				case "delta":
					target, ahead := x.ahead()
					if !ahead {
						target = "open"
					}
					got, sent := "", ""
					if !ahead || target != "" {
						if sent = x.add(target, st.text); sent != "" {
							got = target
						}
					}
					require.Equal(t, st.want, got, "step %d", i)
					if st.sent != "" {
						require.Equal(t, st.sent, sent, "step %d", i)
					}
				case "reopened":
					x.reopened(st.id)
				case "cut":
					x.cut(st.id)
				case "reached":
					x.reached(st.id, false)
				case "failed":
					x.reached(st.id, true)
				case "arrived":
					x.transcriptArrived()
				case "drop":
					x.drop(st.id)
				case "finish":
					require.Equal(t, st.want, x.finish(st.id, st.text), "step %d", i)
				}
			}
		})
	}
}

// A transcription session's committed items stay open, in commit order, until recorded once.
func TestTranscriptsOpenItems(t *testing.T) {
	tests := []struct {
		name   string
		opened []string
		closed []string
		was    []bool // closed's answers: whether the item was open
		open   []string
	}{
		{name: "none", closed: []string{"a"}, was: []bool{false}},
		{name: "in order", opened: []string{"a", "b"}, closed: []string{"a", "b"}, was: []bool{true, true}},
		{name: "out of order", opened: []string{"a", "b", "c"}, closed: []string{"b"}, was: []bool{true},
			open: []string{"a", "c"}},
		{name: "recorded once", opened: []string{"a"}, closed: []string{"a", "a"}, was: []bool{true, false}},
		{name: "never committed", opened: []string{"a"}, closed: []string{"spoken"}, was: []bool{false},
			open: []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var x transcripts
			for _, id := range tt.opened {
				x.opened(id)
			}
			for i, id := range tt.closed {
				require.Equal(t, tt.was[i], x.closed(id), "closed(%s)", id)
			}
			if len(tt.open) == 0 {
				require.Empty(t, x.open)
			} else {
				require.Equal(t, tt.open, x.open)
			}
		})
	}
}
