package stage

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// include=logprobs needs the local recognizer's lattice: a remote ASR's answer has no
// posteriors, so asking one is refused as an invalid request, not answered without them.
func TestTranscribeLogprobsNeedsLocalASR(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    *Pipeline
		want string
	}{
		{"remote asr", &Pipeline{asr: newRemoteASR(RemoteConfig{BaseURL: "http://127.0.0.1:1/v1"})}, "remote"},
		{"no asr", &Pipeline{}, "no ASR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := tc.p.TranscribeLogprobs(context.Background(), make([]float32, 1600), nil)
			require.ErrorIs(t, err, ErrInvalidRequest)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
