package session

import (
	"github.com/omniserve/omniserve/internal/duplex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResponseConversationView(t *testing.T) {
	var c conversation
	it := &item{ID: "item_a"}
	c.insert(it, "")
	own := &item{ID: "item_own"}
	tests := []struct {
		name   string
		r      *response
		convID *string
		item   *item
	}{
		{"in the conversation", &response{itemID: "item_a"}, ptr("conv_abc"), it},
		{"deleted by the client", &response{itemID: "item_gone"}, ptr("conv_abc"), nil},
		{"out of band", &response{outOfBand: true, item: own, itemID: "item_a"}, nil, own},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.convID, tc.r.conversationID("duplex-abc"))
			require.Same(t, tc.item, tc.r.itemIn(&c))
		})
	}
}

func TestConversationItemEvents(t *testing.T) {
	var c conversation
	a, b := &item{ID: "item_a", Type: "message"}, &item{ID: "item_b", Type: "message"}
	c.insert(a, "")
	c.insert(b, "")
	tests := []struct {
		name  string
		ev    Event
		prev  *string
		model bool
	}{
		{"added first", c.added(a, 3, true), nil, true},
		{"added second", c.added(b, 3, false), ptr("item_a"), false},
		{"done second", c.done(b, 4, true), ptr("item_a"), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.model, tc.ev.Model)
			p, ok := tc.ev.Effect.(ConversationItem)
			require.True(t, ok, "%T", tc.ev.Effect)
			require.Equal(t, tc.prev, p.PreviousItemID)
		})
	}
	r := &response{id: "resp_1", epoch: 2}
	ev := r.outputItemAdded(1, b)
	require.Equal(t, 2, ev.Epoch)
	require.True(t, ev.Model)
	require.Equal(t, 1, effectOf[OutputItem](t, ev).OutputIndex)
}

func TestCheckInstructionsLimit(t *testing.T) {
	tests := []struct {
		name string
		text string
		code string
	}{
		{"within", strings.Repeat("a", 10), ""},
		{"empty", "", ""},
		{"too long", strings.Repeat("a", 11), "string_above_max_length"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fe := checkInstructions(tc.text, "session.instructions", 10, nil)
			if tc.code == "" {
				require.Nil(t, fe)
				return
			}
			require.Equal(t, tc.code, fe.Code)
			require.Equal(t, "session.instructions", fe.Param)
		})
	}
}

// answeredCalls times the client's answers for the next response, bounded, and hands them over
// once.
func TestAnsweredCalls(t *testing.T) {
	tests := []struct {
		name     string
		calledAt float64
		before   int
		kept     bool
		ms       float64
	}{
		{"timed", 10, 0, true, 1500},
		{"never sent to the client", 0, 0, false, 0},
		{"past the bound", 10, maxToolCallsAnswered, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := make(answeredCalls, tc.before)
			a.time(&item{Name: "f", CallID: "call_1", CalledAt: tc.calledAt}, 11.5)
			got := a.take()
			require.Empty(t, a)
			if !tc.kept {
				require.Len(t, got, tc.before)
				return
			}
			require.Len(t, got, tc.before+1)
			require.Equal(t, "call_1", got[tc.before].CallID)
			require.InDelta(t, tc.ms, got[tc.before].DurationMs, 1e-6)
		})
	}
}

// audioUsage: a response reads the conversation's audio, cached up to what the previous one
// read and wrote; one with its own input[] caches nothing.
func TestAudioUsage(t *testing.T) {
	tests := []struct {
		name      string
		o         respOptions
		conv      int
		prev      usage
		in, cache int
	}{
		{"first response", respOptions{}, 100, usage{}, 100, 0},
		{"after one", respOptions{}, 300, usage{inAudio: 100, outAudio: 150}, 300, 250},
		{"cache bounded by the input", respOptions{}, 200, usage{inAudio: 180, outAudio: 150}, 200, 200},
		{"own input", respOptions{input: []duplex.Message{{Role: "user"}}, inputAudio: 40}, 300, usage{inAudio: 100}, 40, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := newResponses("duplex-test", 0)
			rs.lastUsage = tc.prev
			u := rs.audioUsage(tc.o, tc.conv)
			require.Equal(t, tc.in, u.inAudio)
			require.Equal(t, tc.cache, u.cachedAudio)
		})
	}
	o := Config{Modalities: []string{"audio"}, OutputFormat: AudioFormat{Type: "pcm16", Rate: 24000}}.replyOptions(77)
	require.Equal(t, respOptions{audio: true, maxTokens: 77, format: AudioFormat{Type: "pcm16", Rate: 24000}}, o)
}
