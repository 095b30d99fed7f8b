package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// TestRegisterAdmission: the gauges read the manager's count when scraped, not when registered.
func TestRegisterAdmission(t *testing.T) {
	reg := prometheus.NewRegistry()
	held := 0
	RegisterAdmission(reg, "m", func() int { return held }, 32)
	held = 3
	want := `
# HELP omniserve_realtime_admitted_sessions Realtime admission slots held now, by every session kind (WebSocket, WebRTC, transcription, detached awaiting a resume).
# TYPE omniserve_realtime_admitted_sessions gauge
omniserve_realtime_admitted_sessions{model_name="m"} 3
# HELP omniserve_realtime_session_slots Realtime admission slots in all (server.max_sessions, bounded by the engine's sequences).
# TYPE omniserve_realtime_session_slots gauge
omniserve_realtime_session_slots{model_name="m"} 32
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want)))
}
