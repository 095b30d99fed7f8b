package server

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/metrics"
	"github.com/omniserve/omniserve/internal/realtime"
)

// The shipped Grafana dashboard queries only families the server exports: the collectors'
// (internal/metrics) and the WebRTC transport's RTP families (rtp_metrics.go), registered here
// as build.go registers them.
func TestGrafanaDashboardUsesExportedFamilies(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../deploy/grafana/omniserve.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	reg := prometheus.NewPedanticRegistry()
	metrics.NewCollectors(reg, "m").InitStages(2)
	rtp := newRTPCollector()
	rtp.setSource(&fakeRTP{})
	// The per-call histograms have families once a call has ended.
	rtp.ObserveCall(realtime.RTPStats{PacketsReceived: 10, PacketsSent: 10, RTTMeasured: true})
	reg.MustRegister(rtp)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	re := regexp.MustCompile(`omniserve_[a-z0-9_]+`)
	suffix := regexp.MustCompile(`_(bucket|sum|count)$`)
	used, rtpUsed := 0, 0
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			for _, name := range re.FindAllString(tg.Expr, -1) {
				base := suffix.ReplaceAllString(name, "")
				require.True(t, have[base], "panel %q queries %s, which omniserve does not export", p.Title, name)
				used++
				if regexp.MustCompile(`^omniserve_webrtc_`).MatchString(base) {
					rtpUsed++
				}
			}
		}
	}
	require.Positive(t, used)
	require.Positive(t, rtpUsed, "the WebRTC RTP families have panels")
}
