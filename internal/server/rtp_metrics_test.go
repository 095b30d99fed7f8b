package server

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/realtime"
)

type fakeRTP struct {
	live  []realtime.RTPStats
	ended realtime.RTPTotals
}

func (f *fakeRTP) RTPStats() []realtime.RTPStats { return f.live }
func (f *fakeRTP) EndedRTP() realtime.RTPTotals  { return f.ended }

// TestRTPCollector: the packet counters sum the ended calls and the live ones; an ended call's
// jitter, loss and round trip go to the histograms (the sent side only once the browser
// reported on it); the families pass promlint and carry no call id.
func TestRTPCollector(t *testing.T) {
	t.Parallel()
	c := newRTPCollector()
	require.Empty(t, lint(t, c), "before the transport exists")
	src := &fakeRTP{
		live:  []realtime.RTPStats{{CallID: "rtc_a", PacketsReceived: 100, PacketsSent: 50, PacketsLostIn: 2, BytesSent: 4000}},
		ended: realtime.RTPTotals{Calls: 3, PacketsReceived: 1000, PacketsSent: 700, PacketsLostOut: 7, BytesSent: 56000},
	}
	c.setSource(src)
	c.ObserveCall(realtime.RTPStats{PacketsReceived: 98, PacketsLostIn: 2, JitterIn: 0.003, PacketsSent: 100, PacketsLostOut: 1,
		JitterOut: 0.002, RTT: 0.03, RTTMeasured: true})
	c.ObserveCall(realtime.RTPStats{PacketsReceived: 10, PacketsSent: 5}) // no receiver report: nothing on the sent side
	want := `
# HELP omniserve_webrtc_rtp_packets_total RTP packets of WebRTC calls, live and ended: direction received (the browser's audio) or sent (the replies' audio).
# TYPE omniserve_webrtc_rtp_packets_total counter
omniserve_webrtc_rtp_packets_total{direction="received"} 1100
omniserve_webrtc_rtp_packets_total{direction="sent"} 750
# HELP omniserve_webrtc_rtp_packets_lost_total RTP packets of WebRTC calls lost on the way: received = sequence gaps in the browser's audio; sent = what the browsers' RTCP receiver reports count lost of the replies' audio.
# TYPE omniserve_webrtc_rtp_packets_lost_total counter
omniserve_webrtc_rtp_packets_lost_total{direction="received"} 2
omniserve_webrtc_rtp_packets_lost_total{direction="sent"} 7
# HELP omniserve_webrtc_calls_ended_total WebRTC calls that have ended.
# TYPE omniserve_webrtc_calls_ended_total counter
omniserve_webrtc_calls_ended_total 3
# HELP omniserve_webrtc_call_rtt_seconds Per ended call whose browser answered a sender report, the last round-trip time from its RTCP receiver reports.
# TYPE omniserve_webrtc_call_rtt_seconds histogram
omniserve_webrtc_call_rtt_seconds_bucket{le="0.001"} 0
omniserve_webrtc_call_rtt_seconds_bucket{le="0.005"} 0
omniserve_webrtc_call_rtt_seconds_bucket{le="0.01"} 0
omniserve_webrtc_call_rtt_seconds_bucket{le="0.025"} 0
omniserve_webrtc_call_rtt_seconds_bucket{le="0.05"} 1
omniserve_webrtc_call_rtt_seconds_bucket{le="0.1"} 1
omniserve_webrtc_call_rtt_seconds_bucket{le="0.2"} 1
omniserve_webrtc_call_rtt_seconds_bucket{le="0.4"} 1
omniserve_webrtc_call_rtt_seconds_bucket{le="0.8"} 1
omniserve_webrtc_call_rtt_seconds_bucket{le="+Inf"} 1
omniserve_webrtc_call_rtt_seconds_sum 0.03
omniserve_webrtc_call_rtt_seconds_count 1
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want),
		"omniserve_webrtc_rtp_packets_total", "omniserve_webrtc_rtp_packets_lost_total", "omniserve_webrtc_calls_ended_total", "omniserve_webrtc_call_rtt_seconds"))
	require.Equal(t, 2, testutil.CollectAndCount(c, "omniserve_webrtc_call_jitter_seconds"), "received and sent")
	require.Empty(t, lint(t, c))
}

func lint(t *testing.T, c prometheus.Collector) []string {
	t.Helper()
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	var out []string
	for _, p := range problems {
		out = append(out, p.Metric+": "+p.Text)
	}
	return out
}
