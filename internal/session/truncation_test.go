package session

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/requestclient"
)

// The items of the turns the engine dropped leave the conversation, each announced with
// conversation.item.deleted (reason "truncation"); system items, the active response's item,
// the newest item and items of later turns stay.
func TestConversationTruncated(t *testing.T) {
	type it struct {
		id, role string
		turn     int
	}
	tests := []struct {
		name    string
		items   []it
		through int
		keep    string
		deleted []string
		left    []string
	}{
		{"whole turns go", []it{{"u1", "user", 1}, {"a1", "assistant", 1}, {"u2", "user", 2}, {"a2", "assistant", 2}, {"u3", "user", 3}}, 2, "",
			[]string{"u1", "a1", "u2", "a2"}, []string{"u3"}},
		{"later turns stay", []it{{"u1", "user", 1}, {"a1", "assistant", 1}, {"u2", "user", 2}}, 1, "", []string{"u1", "a1"}, []string{"u2"}},
		{"system items stay", []it{{"s1", "system", 1}, {"u1", "user", 1}, {"u2", "user", 2}}, 1, "", []string{"u1"}, []string{"s1", "u2"}},
		{"untagged items stay", []it{{"x", "user", 0}, {"u1", "user", 1}, {"u2", "user", 2}}, 1, "", []string{"u1"}, []string{"x", "u2"}},
		{"the active response's item stays", []it{{"u1", "user", 1}, {"a1", "assistant", 1}, {"u2", "user", 2}}, 1, "a1", []string{"u1"}, []string{"a1", "u2"}},
		{"the newest item stays", []it{{"u1", "user", 1}, {"a1", "assistant", 1}}, 1, "", []string{"u1"}, []string{"a1"}},
		{"nothing of the turns", []it{{"u3", "user", 3}, {"u4", "user", 4}}, 2, "", nil, []string{"u3", "u4"}},
		{"empty", nil, 2, "", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &conversation{}
			for _, x := range tt.items {
				c.insert(&item{ID: x.id, Role: x.role, Type: "message", Turn: x.turn}, "")
			}
			acts := c.truncated(&duplex.Truncated{Through: tt.through, Messages: 3}, tt.keep, 2)
			var deleted []string
			for _, a := range acts {
				if e, ok := a.(emit); ok {
					for _, ev := range e.evs {
						d := ev.Effect.(ItemDeleted)
						require.Equal(t, ReasonTruncation, d.Reason)
						require.Equal(t, 2, ev.Epoch)
						deleted = append(deleted, d.ItemID)
					}
				}
			}
			require.Equal(t, tt.deleted, deleted)
			require.Equal(t, tt.left, nilIfEmpty(c.ids()))
		})
	}
}

// A turn that failed because the conversation no longer fits tells the client; other failures
// of turns without a response are not events.
func TestContextFailure(t *testing.T) {
	cle := fmt.Errorf("truncation is disabled: %w", requestclient.ErrContextLength)
	evs := contextFailure(cle, 3)
	require.Len(t, evs, 1)
	require.Equal(t, 3, evs[0].Epoch)
	e, ok := evs[0].Effect.(Error)
	require.True(t, ok)
	require.Equal(t, "context_length_exceeded", e.Code)
	require.Contains(t, e.Message, "truncation is disabled")
	require.Nil(t, contextFailure(errors.New("engine broke"), 3))
	require.Nil(t, (&conversation{}).truncated(nil, "", 1))
}

// Items get the session's input turn when they join the conversation.
func TestConversationTagsTurns(t *testing.T) {
	c := &conversation{turn: 4}
	a := &item{ID: "a"}
	c.insert(a, "")
	c.turn = 5
	b := &item{ID: "b", Turn: 2}
	c.insert(b, "root")
	require.Equal(t, 4, a.Turn)
	require.Equal(t, 2, b.Turn, "an item that has its turn keeps it")
}

// session.truncation is checked and applied; a refusal names it and changes nothing.
func TestApplyTruncation(t *testing.T) {
	tests := []struct {
		name string
		in   *duplex.Truncation
		want duplex.Truncation
		err  bool
	}{
		{"absent keeps the setting", nil, duplex.Truncation{Mode: duplex.TruncationDisabled}, false},
		{"auto", &duplex.Truncation{Mode: duplex.TruncationAuto}, duplex.Truncation{Mode: duplex.TruncationAuto}, false},
		{"empty is auto", &duplex.Truncation{}, duplex.Truncation{Mode: duplex.TruncationAuto}, false},
		{"retention ratio", &duplex.Truncation{Mode: duplex.TruncationRetentionRatio, RetentionRatio: 0.7, PostInstructions: 500},
			duplex.Truncation{Mode: duplex.TruncationRetentionRatio, RetentionRatio: 0.7, PostInstructions: 500}, false},
		{"ratio out of range", &duplex.Truncation{Mode: duplex.TruncationRetentionRatio, RetentionRatio: 2}, duplex.Truncation{Mode: duplex.TruncationDisabled}, true},
		{"unknown mode", &duplex.Truncation{Mode: "often"}, duplex.Truncation{Mode: duplex.TruncationDisabled}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Truncation: duplex.Truncation{Mode: duplex.TruncationDisabled}}
			fe := ConfigPatch{Truncation: tt.in}.applyTruncation(&cfg)
			require.Equal(t, tt.want, cfg.Truncation)
			if !tt.err {
				require.Nil(t, fe)
				return
			}
			require.NotNil(t, fe)
			require.Equal(t, "invalid_value", fe.Code)
			require.Equal(t, "session.truncation", fe.Param)
		})
	}
}
