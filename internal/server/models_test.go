package server

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestModelNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		served, aliases string
		id              string
		wantID          string
		listed          []string
		accepts, refuse []string
	}{
		{"defaults", "", "", "dummy", "dummy", []string{"dummy"}, []string{"dummy"}, []string{"", "gpt-realtime", "dummy2"}},
		{"served names replace the id", "omni, gpt-realtime", "", "dummy", "omni", []string{"omni", "gpt-realtime"},
			[]string{"omni", "gpt-realtime"}, []string{"dummy", "gpt-realtime-2.1"}},
		{"aliases and prefixes", "", "gpt-realtime*,whisper-1,dummy,whisper-1", "dummy", "dummy", []string{"dummy", "whisper-1"},
			[]string{"dummy", "whisper-1", "gpt-realtime", "gpt-realtime-2.1"}, []string{"gpt-4o", "whisper-2", "xgpt-realtime"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newModelNames(tc.served, tc.aliases, tc.id)
			require.Equal(t, tc.wantID, m.ID())
			require.Equal(t, tc.listed, m.Listed())
			for _, n := range tc.accepts {
				require.True(t, m.Accepts(n), n)
			}
			for _, n := range tc.refuse {
				require.False(t, m.Accepts(n), n)
			}
		})
	}
}
