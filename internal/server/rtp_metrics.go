package server

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/omniserve/omniserve/internal/realtime"
)

// rtpSource is what the RTP collector reads: the WebRTC transport's live calls and the totals
// of the ended ones.
type rtpSource interface {
	RTPStats() []realtime.RTPStats
	EndedRTP() realtime.RTPTotals
}

// rtpCollector exports the WebRTC calls' RTP figures. Labels stay bounded (no call id): the
// packet counters sum the ended calls' totals and the live calls' counts at scrape time; each
// call's jitter, loss and round trip are observed in histograms when it ends (ObserveCall).
type rtpCollector struct {
	src                  atomic.Pointer[rtpSource]
	packets, lost, bytes *prometheus.Desc
	calls                *prometheus.Desc
	jitter, lossRatio    *prometheus.HistogramVec
	rtt                  prometheus.Histogram
}

func newRTPCollector() *rtpCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("omniserve_webrtc_"+name, help, labels, nil)
	}
	return &rtpCollector{
		packets: d("rtp_packets_total", "RTP packets of WebRTC calls, live and ended: direction received (the browser's audio) or sent (the replies' audio).", "direction"),
		lost: d("rtp_packets_lost_total", "RTP packets of WebRTC calls lost on the way: received = sequence gaps in the browser's audio; "+
			"sent = what the browsers' RTCP receiver reports count lost of the replies' audio.", "direction"),
		bytes: d("rtp_payload_bytes_total", "RTP payload bytes of WebRTC calls, live and ended, by direction.", "direction"),
		calls: d("calls_ended_total", "WebRTC calls that have ended."),
		jitter: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "omniserve_webrtc_call_jitter_seconds",
			Help: "Per ended call, the last interarrival jitter (RFC 3550): received = of the browser's audio as it arrived; " +
				"sent = of the reply's audio as the browser's last RTCP receiver report stated it.",
			Buckets: []float64{.001, .0025, .005, .01, .02, .04, .08, .16, .32}}, []string{"direction"}),
		lossRatio: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "omniserve_webrtc_call_packet_loss_ratio",
			Help:    "Per ended call with packets that way, lost / (received + lost), by direction (as rtp_packets_lost_total).",
			Buckets: []float64{0, .001, .005, .01, .02, .05, .1, .2, .5}}, []string{"direction"}),
		rtt: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "omniserve_webrtc_call_rtt_seconds",
			Help:    "Per ended call whose browser answered a sender report, the last round-trip time from its RTCP receiver reports.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .2, .4, .8}}),
	}
}

// setSource starts reading the transport's figures (the collector exists before it).
func (c *rtpCollector) setSource(src rtpSource) { c.src.Store(&src) }

// ObserveCall observes an ended call's figures (realtime.CallsConfig.OnCallEnd).
func (c *rtpCollector) ObserveCall(s realtime.RTPStats) {
	if s.PacketsReceived > 0 {
		c.jitter.WithLabelValues("received").Observe(s.JitterIn)
		c.lossRatio.WithLabelValues("received").Observe(float64(s.PacketsLostIn) / float64(int64(s.PacketsReceived)+s.PacketsLostIn))
	}
	if s.PacketsSent > 0 && s.RTTMeasured { // the browser reported on the reply's audio
		c.jitter.WithLabelValues("sent").Observe(s.JitterOut)
		c.lossRatio.WithLabelValues("sent").Observe(float64(s.PacketsLostOut) / float64(s.PacketsSent))
		c.rtt.Observe(s.RTT)
	}
}

func (c *rtpCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.packets, c.lost, c.bytes, c.calls} {
		ch <- d
	}
	c.jitter.Describe(ch)
	c.lossRatio.Describe(ch)
	c.rtt.Describe(ch)
}

func (c *rtpCollector) Collect(ch chan<- prometheus.Metric) {
	var t realtime.RTPTotals
	var bytesIn, bytesOut uint64
	if src := c.src.Load(); src != nil {
		t = (*src).EndedRTP()
		bytesIn, bytesOut = t.BytesReceived, t.BytesSent
		for _, s := range (*src).RTPStats() {
			t.PacketsReceived += s.PacketsReceived
			t.PacketsSent += s.PacketsSent
			t.PacketsLostIn += s.PacketsLostIn
			t.PacketsLostOut += s.PacketsLostOut
			bytesIn += s.BytesReceived
			bytesOut += s.BytesSent
		}
	}
	counter := prometheus.CounterValue
	ch <- prometheus.MustNewConstMetric(c.packets, counter, float64(t.PacketsReceived), "received")
	ch <- prometheus.MustNewConstMetric(c.packets, counter, float64(t.PacketsSent), "sent")
	ch <- prometheus.MustNewConstMetric(c.lost, counter, float64(t.PacketsLostIn), "received")
	ch <- prometheus.MustNewConstMetric(c.lost, counter, float64(t.PacketsLostOut), "sent")
	ch <- prometheus.MustNewConstMetric(c.bytes, counter, float64(bytesIn), "received")
	ch <- prometheus.MustNewConstMetric(c.bytes, counter, float64(bytesOut), "sent")
	ch <- prometheus.MustNewConstMetric(c.calls, counter, float64(t.Calls))
	c.jitter.Collect(ch)
	c.lossRatio.Collect(ch)
	c.rtt.Collect(ch)
}
