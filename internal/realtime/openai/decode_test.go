package openai_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/duplex"
	"github.com/omniserve/omniserve/internal/realtime/openai"
	"github.com/omniserve/omniserve/internal/session"
)

// A turn_detection object becomes the values of the keys the client sent and the set of those
// keys: an absent key (or a null idle_timeout_ms) is not in the set, whatever its zero value.
func TestDecodeTurnDetectionKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		frame string
		want  *session.TurnDetectionPatch
	}{
		{"null", `{"turn_detection":null}`, nil},
		{"empty object", `{"turn_detection":{}}`, &session.TurnDetectionPatch{}},
		{"explicit zeros are sent", `{"turn_detection":{"threshold":0,"silence_duration_ms":0,"create_response":false}}`,
			&session.TurnDetectionPatch{Keys: session.TurnKeyThreshold | session.TurnKeySilenceDuration | session.TurnKeyCreateResponse}},
		{"null idle timeout is absent", `{"turn_detection":{"type":"server_vad","idle_timeout_ms":null}}`,
			&session.TurnDetectionPatch{Value: session.TurnDetection{TurnDetection: duplex.TurnDetection{Type: "server_vad"}},
				Keys: session.TurnKeyType}},
		{"every key", `{"turn_detection":{"type":"semantic_vad","threshold":0.7,"prefix_padding_ms":200,"silence_duration_ms":800,` +
			`"idle_timeout_ms":6000,"create_response":true,"interrupt_response":true,"eagerness":"high"}}`,
			&session.TurnDetectionPatch{
				Value: session.TurnDetection{TurnDetection: duplex.TurnDetection{Type: "semantic_vad", Threshold: 0.7,
					PrefixPaddingMs: 200, SilenceDurationMs: 800, Eagerness: "high"},
					IdleTimeoutMs: 6000, CreateResponse: true, InterruptResponse: true},
				Keys: session.TurnKeyType | session.TurnKeyThreshold | session.TurnKeyPrefixPadding | session.TurnKeySilenceDuration |
					session.TurnKeyIdleTimeout | session.TurnKeyCreateResponse | session.TurnKeyInterruptResponse | session.TurnKeyEagerness}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd, werr := openai.Decode([]byte(`{"type":"session.update","session":` + tc.frame + `}`))
			require.Nil(t, werr)
			up, ok := cmd.(*session.UpdateSession)
			require.True(t, ok, "%T", cmd)
			require.True(t, up.Patch.TurnDetectionSet)
			require.Equal(t, tc.want, up.Patch.TurnDetection)
		})
	}
}
