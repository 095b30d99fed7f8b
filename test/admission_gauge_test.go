package test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAdmissionGaugeCountsEveryKind: a transcription session holds an admission slot without a
// duplex engine stream; omniserve_realtime_admitted_sessions counts it (the autoscaler's gauge),
// where omniserve_duplex_active_sessions, the gauge the HPA read before, stays at 0. Closing the
// session returns the slot.
func TestAdmissionGaugeCountsEveryKind(t *testing.T) {
	t.Parallel()
	s := startBinary(t, "--config", "configs/omni-cpu.yaml", "--model", "dummy:tiny", "--max-sessions", "4",
		"--cache-dir", filepath.Join(t.TempDir(), "cache"))
	require.Equal(t, 4.0, metricValue(t, s, "omniserve_realtime_session_slots"))
	require.Zero(t, metricValue(t, s, "omniserve_realtime_admitted_sessions"))
	c := dialResume(t, "ws://"+s.addr+"/v1/realtime?intent=transcription")
	require.Equal(t, "session.created", c.next(t, 10*time.Second)["type"])
	require.Equal(t, 1.0, metricValue(t, s, "omniserve_realtime_admitted_sessions"))
	require.Zero(t, metricValue(t, s, "omniserve_duplex_active_sessions"), "a transcription session opens no duplex stream")
	c.send(t, map[string]any{"type": "session.close"})
	collectUntil(t, c, "session.closed", 10*time.Second)
	require.Eventually(t, func() bool { return metricValue(t, s, "omniserve_realtime_admitted_sessions") == 0 },
		10*time.Second, 50*time.Millisecond, "the slot is returned")
}
