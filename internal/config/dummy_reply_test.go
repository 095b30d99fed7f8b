package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDummyReplyRange(t *testing.T) {
	for _, tc := range []struct {
		in     string
		lo, hi int
		bad    bool
	}{
		{"8-32", 8, 32, false},
		{" 60 ", 60, 60, false},
		{"1-1", 1, 1, false},
		{"", 0, 0, false}, // the engine's default
		{"0-5", 0, 0, true},
		{"9-8", 0, 0, true},
		{"-5", 0, 0, true},
		{"a-b", 0, 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			lo, hi, err := Engine{DummyReplyWords: tc.in}.DummyReplyRange()
			if tc.bad {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, [2]int{tc.lo, tc.hi}, [2]int{lo, hi})
		})
	}
	require.Equal(t, "8-32", Defaults().Engine.DummyReplyWords)
}
