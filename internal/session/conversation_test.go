package session

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ids is the conversation's item ids in order.
func (c *conversation) ids() []string {
	out := make([]string, 0, len(c.items))
	for _, it := range c.items {
		out = append(out, it.ID)
	}
	return out
}

func convOf(ids ...string) *conversation {
	c := &conversation{}
	for _, id := range ids {
		c.insert(&item{ID: id, Role: "user", Type: "message"}, "")
	}
	return c
}

func TestConversationInsertRemove(t *testing.T) {
	tests := []struct {
		name   string
		start  []string
		prev   string
		ok     bool
		want   []string
		prevOf *string // previousID of the inserted item
	}{
		{"append to empty", nil, "", true, []string{"n"}, nil},
		{"append", []string{"a", "b"}, "", true, []string{"a", "b", "n"}, ptr("b")},
		{"root", []string{"a", "b"}, "root", true, []string{"n", "a", "b"}, nil},
		{"after a", []string{"a", "b"}, "a", true, []string{"a", "n", "b"}, ptr("a")},
		{"unknown previous", []string{"a"}, "x", false, []string{"a"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := convOf(tc.start...)
			require.Equal(t, tc.ok, c.hasPrevious(tc.prev))
			n := &item{ID: "n"}
			require.Equal(t, tc.ok, c.insert(n, tc.prev))
			require.Equal(t, tc.want, c.ids())
			require.Equal(t, tc.prevOf, c.previousID(n))
			if tc.ok {
				require.Same(t, n, c.find("n"))
				require.True(t, c.remove("n"))
			}
			require.Nil(t, c.find("n"))
			require.False(t, c.remove("n"))
			require.Equal(t, tc.start, nilIfEmpty(c.ids()))
		})
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func TestConversationIDs(t *testing.T) {
	c := convOf("a", "b")
	require.Equal(t, "b", *c.lastID())
	require.Nil(t, (&conversation{}).lastID())
	require.Equal(t, "z", c.freshID("z"), "an unused announced id is kept")
	fresh := c.freshID("a")
	require.NotEqual(t, "a", fresh, "an id the conversation holds is not reused")
	require.True(t, strings.HasPrefix(fresh, "item_"))
	require.True(t, strings.HasPrefix(c.freshID(""), "item_"))
}

func TestConversationCalls(t *testing.T) {
	c := &conversation{}
	c.insert(&item{ID: "f1", Type: "function_call", CallID: "call_1"}, "")
	c.insert(&item{ID: "o1", Type: "function_call_output", CallID: "call_1"}, "")
	c.insert(&item{ID: "f2", Type: "function_call", CallID: "call_2"}, "")
	tests := []struct {
		call, wantCall, wantOutput string
	}{
		{"call_1", "f1", "o1"},
		{"call_2", "f2", ""},
		{"call_3", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.call, func(t *testing.T) {
			got, out := "", ""
			if it := c.findCall(tc.call); it != nil {
				got = it.ID
			}
			if it := c.callOutput(tc.call); it != nil {
				out = it.ID
			}
			require.Equal(t, tc.wantCall, got)
			require.Equal(t, tc.wantOutput, out)
		})
	}
}

func TestConversationTrim(t *testing.T) {
	text := func(id string, n int) *item { return &item{ID: id, Text: strings.Repeat("x", n)} }
	tests := []struct {
		name        string
		sizes       []int
		limit       int
		keep        string
		wantDropped []string
		wantLeft    []string
	}{
		{"under the limit", []int{10, 10}, 20, "", nil, []string{"i0", "i1"}},
		{"oldest first", []int{10, 10, 10}, 15, "", []string{"i0", "i1"}, []string{"i2"}},
		{"the newest stays even over", []int{10, 30}, 15, "", []string{"i0"}, []string{"i1"}},
		{"the active response's item stays", []int{10, 10, 10}, 15, "i0", []string{"i1"}, []string{"i0", "i2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &conversation{}
			for i, n := range tc.sizes {
				c.insert(text("i"+string(rune('0'+i)), n), "")
			}
			var dropped []string
			for _, it := range c.trim(tc.limit, tc.keep) {
				dropped = append(dropped, it.ID)
			}
			require.Equal(t, tc.wantDropped, dropped)
			require.Equal(t, tc.wantLeft, c.ids())
		})
	}
}

func TestConversationTruncate(t *testing.T) {
	tests := []struct {
		name     string
		it       item
		index    int
		endMs    float64
		length   float64
		wantCut  float64
		wantCode string
		wantPar  string
	}{
		{"cut", item{Role: "assistant", Audio: true, AudioMs: 1000, Text: "hi"}, 0, 400, -1, 400, "", ""},
		{"past the end within slack", item{Role: "assistant", Audio: true, AudioMs: 1000}, 0, 1200, -1, 1000, "", ""},
		{"active: what was sent", item{Role: "assistant", Audio: true}, 0, 300, 500, 300, "", ""},
		{"past the slack", item{Role: "assistant", Audio: true, AudioMs: 1000}, 0, 1300, -1, 0, "invalid_value", "audio_end_ms"},
		{"user item", item{Role: "user", Audio: true, AudioMs: 1000}, 0, 100, -1, 0, "invalid_value", "item_id"},
		{"text item", item{Role: "assistant"}, 0, 100, -1, 0, "invalid_value", "item_id"},
		{"content index", item{Role: "assistant", Audio: true, AudioMs: 1000}, 1, 100, -1, 0, "invalid_value", "content_index"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			it := tc.it
			it.ID = "a"
			c := &conversation{items: []*item{&it}}
			cut, err := c.truncate("a", tc.index, tc.endMs, tc.length)
			if tc.wantCode != "" {
				require.NotNil(t, err)
				require.Equal(t, tc.wantCode, err.code)
				require.Equal(t, tc.wantPar, err.param)
				require.False(t, it.Truncated)
				return
			}
			require.Nil(t, err)
			require.Equal(t, tc.wantCut, cut)
			require.Equal(t, tc.wantCut, it.AudioMs)
			require.True(t, it.Truncated)
			require.Empty(t, it.Text)
		})
	}
	_, err := (&conversation{}).truncate("x", 0, 0, -1)
	require.Equal(t, "item_truncate_invalid_item_id", err.code)
}

func TestConversationAudioTokensAndWire(t *testing.T) {
	c := &conversation{}
	c.insert(&item{ID: "u", Role: "user", Type: "message", Audio: true, AudioMs: 1000}, "")
	c.insert(&item{ID: "t", Role: "user", Type: "message", Text: "hi"}, "")
	require.Equal(t, (&item{Role: "user", Audio: true, AudioMs: 1000}).audioTokens(), c.audioTokens())
	require.Positive(t, c.audioTokens())
	w := c.views()
	require.Len(t, w, 2)
	require.Equal(t, "u", w[0].ID)
	require.Equal(t, "t", w[1].ID)
}
