package server

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExpiryWave(t *testing.T) {
	type pass struct {
		keys  int
		bytes int64
		due   bool
	}
	tests := []struct {
		name   string
		passes []pass
	}{
		{"a few keys wait", []pass{{10, 10 << 10, false}, {20, 20 << 10, false}}},
		{"small passes add up", []pass{{600, 100 << 10, false}, {500, 100 << 10, true}, {10, 1 << 10, true}, {10, 1 << 10, false}}},
		{"a MiB of sessions", []pass{{3, 2 << 20, true}}},
		{"a wave's small tail", []pass{{9600, 9 << 20, true}, {400, 400 << 10, true}, {5, 1 << 10, false}}},
		{"two large passes, then the tail", []pass{{5000, 5 << 20, true}, {5000, 5 << 20, true}, {1, 1, true}, {1, 1, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w expiryWave
			for i, p := range tt.passes {
				require.Equal(t, p.due, w.due(p.keys, p.bytes), "pass %d", i)
			}
		})
	}
}
