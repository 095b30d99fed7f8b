package audio

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStableDelta(t *testing.T) {
	tests := []struct {
		name, emitted, prev, cur string
		final                    bool
		want                     string
	}{
		{"first partial", "", "", "go forward", false, ""},
		{"agreed, last word held", "", "go forward", "go forward ten", false, "go"},
		{"both agreed", "", "go forward ten", "go forward ten meters", false, "go forward"},
		{"extends", "go", "go forward ten", "go forward ten meters", false, " forward"},
		{"disagreement stops", "", "go forward can we", "go forward ten meter", false, "go forward"},
		{"revision of sent words waits", "go", "so forward ten", "so forward ten x", false, ""},
		{"final sends the rest", "go forward", "", "go forward ten meters", true, " ten meters"},
		{"final from nothing", "", "", "go forward", true, "go forward"},
		{"shorter partial", "go forward", "go forward", "go", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, StableDelta(tt.emitted, tt.prev, tt.cur, tt.final))
		})
	}
}
