package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/omniserve/omniserve/internal/realtime"
)

// rtpSource is what the RTP collector reads: the WebRTC transport's live calls and the totals
// of the ended ones.
type rtpSource interface {
	RTPStats() []realtime.RTPStats
	EndedRTP() realtime.RTPTotals
}

// rtpCollector exports the WebRTC calls' RTP figures at scrape time: per live call (label
// call_id; a call's series go when it ends) and, for the ended calls, totals, so that a sum over
// both counts every packet.
type rtpCollector struct {
	src                                 rtpSource
	packets, lost, bytes, jitter, rtt   *prometheus.Desc
	endedCalls, endedPackets, endedLost *prometheus.Desc
}

func newRTPCollector(src rtpSource) *rtpCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("omniserve_webrtc_"+name, help, labels, nil)
	}
	return &rtpCollector{src: src,
		packets: d("rtp_packets_total", "RTP packets of a live call: direction received (the browser's audio) or sent (the reply's audio).", "call_id", "direction"),
		lost: d("rtp_packets_lost_total", "RTP packets of a live call lost on the way: received = sequence gaps in the browser's audio; "+
			"sent = what the browser's RTCP receiver reports count lost of the reply's audio.", "call_id", "direction"),
		bytes: d("rtp_bytes_total", "RTP payload bytes of a live call, by direction.", "call_id", "direction"),
		jitter: d("rtp_jitter_seconds", "Interarrival jitter (RFC 3550) of a live call: received = of the browser's audio as it arrives; "+
			"sent = of the reply's audio as the browser's RTCP receiver reports state it.", "call_id", "direction"),
		rtt: d("rtt_seconds", "Round-trip time of a live call from the browser's RTCP receiver reports answering the server's sender "+
			"reports (absent until the first one).", "call_id"),
		endedCalls:   d("ended_calls_total", "WebRTC calls that have ended."),
		endedPackets: d("ended_rtp_packets_total", "RTP packets of the calls that have ended, by direction.", "direction"),
		endedLost:    d("ended_rtp_packets_lost_total", "RTP packets lost of the calls that have ended, by direction (as rtp_packets_lost_total).", "direction"),
	}
}

func (c *rtpCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.packets, c.lost, c.bytes, c.jitter, c.rtt, c.endedCalls, c.endedPackets, c.endedLost} {
		ch <- d
	}
}

func (c *rtpCollector) Collect(ch chan<- prometheus.Metric) {
	counter, gauge := prometheus.CounterValue, prometheus.GaugeValue
	for _, s := range c.src.RTPStats() {
		ch <- prometheus.MustNewConstMetric(c.packets, counter, float64(s.PacketsReceived), s.CallID, "received")
		ch <- prometheus.MustNewConstMetric(c.packets, counter, float64(s.PacketsSent), s.CallID, "sent")
		ch <- prometheus.MustNewConstMetric(c.lost, counter, float64(s.PacketsLostIn), s.CallID, "received")
		ch <- prometheus.MustNewConstMetric(c.lost, counter, float64(s.PacketsLostOut), s.CallID, "sent")
		ch <- prometheus.MustNewConstMetric(c.bytes, counter, float64(s.BytesReceived), s.CallID, "received")
		ch <- prometheus.MustNewConstMetric(c.bytes, counter, float64(s.BytesSent), s.CallID, "sent")
		ch <- prometheus.MustNewConstMetric(c.jitter, gauge, s.JitterIn, s.CallID, "received")
		ch <- prometheus.MustNewConstMetric(c.jitter, gauge, s.JitterOut, s.CallID, "sent")
		if s.RTTMeasured {
			ch <- prometheus.MustNewConstMetric(c.rtt, gauge, s.RTT, s.CallID)
		}
	}
	t := c.src.EndedRTP()
	ch <- prometheus.MustNewConstMetric(c.endedCalls, counter, float64(t.Calls))
	ch <- prometheus.MustNewConstMetric(c.endedPackets, counter, float64(t.PacketsReceived), "received")
	ch <- prometheus.MustNewConstMetric(c.endedPackets, counter, float64(t.PacketsSent), "sent")
	ch <- prometheus.MustNewConstMetric(c.endedLost, counter, float64(t.PacketsLostIn), "received")
	ch <- prometheus.MustNewConstMetric(c.endedLost, counter, float64(t.PacketsLostOut), "sent")
}
