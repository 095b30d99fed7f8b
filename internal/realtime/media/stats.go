package media

import (
	"sync"

	"github.com/pion/interceptor"
	"github.com/pion/interceptor/pkg/stats"
	"github.com/pion/webrtc/v4"
)

// RTPStats are one call's RTP figures: the interceptor's counts of what was sent and received,
// the sequence-number gaps and interarrival jitter (RFC 3550) of the browser's audio, and
// what the browser's RTCP receiver reports say of ours, with the round trip they measure
// against our sender reports.
type RTPStats struct {
	CallID string
	// PacketsReceived and PacketsLostIn: the browser's audio (lost: sequence gaps).
	PacketsReceived uint64
	PacketsLostIn   int64
	BytesReceived   uint64
	// JitterIn is the browser's audio's interarrival jitter, in seconds.
	JitterIn float64
	// PacketsSent and BytesSent: the reply's audio.
	PacketsSent uint64
	BytesSent   uint64
	// PacketsLostOut and JitterOut (seconds) are what the browser's receiver reports say of the
	// reply's audio; RTT (seconds) is measured from them (RTTMeasured: at least one report).
	PacketsLostOut int64
	JitterOut      float64
	RTT            float64
	RTTMeasured    bool
}

// RTPTotals are the packet counts of the calls that have ended.
type RTPTotals struct {
	Calls                         int
	PacketsReceived, PacketsSent  uint64
	BytesReceived, BytesSent      uint64
	PacketsLostIn, PacketsLostOut int64
}

// Add counts one ended call.
func (t *RTPTotals) Add(s RTPStats) {
	t.Calls++
	t.PacketsReceived += s.PacketsReceived
	t.PacketsSent += s.PacketsSent
	t.BytesReceived += s.BytesReceived
	t.BytesSent += s.BytesSent
	t.PacketsLostIn += s.PacketsLostIn
	t.PacketsLostOut += s.PacketsLostOut
}

// Recorder holds a call's stats interceptor and the SSRCs of its two streams.
type Recorder struct {
	mu     sync.Mutex
	getter stats.Getter
	in     uint32 // the browser's audio (0 until its track arrives)
	out    uint32 // the reply's audio
}

// RegisterInterceptors is webrtc.RegisterDefaultInterceptors with the call's own stats
// interceptor: the default one files its Getter in a pion package map that only GetStats
// reads, which carries no outbound or RTCP-report figures.
func RegisterInterceptors(m *webrtc.MediaEngine, ir *interceptor.Registry, rec *Recorder) error {
	// The stats interceptor comes first: an interceptor's RTCP writer is wrapped only by those
	// registered before it, and the stats must see the sender reports the report interceptor
	// writes, to match the receiver reports' LSR/DLSR to them (the round trip).
	sf, err := stats.NewInterceptor()
	if err != nil {
		return err
	}
	sf.OnNewPeerConnection(func(_ string, g stats.Getter) {
		rec.mu.Lock()
		rec.getter = g
		rec.mu.Unlock()
	})
	ir.Add(sf)
	if err := webrtc.ConfigureNack(m, ir); err != nil {
		return err
	}
	if err := webrtc.ConfigureRTCPReports(ir); err != nil {
		return err
	}
	if err := webrtc.ConfigureSimulcastExtensionHeaders(m); err != nil {
		return err
	}
	return webrtc.ConfigureTWCCSender(m, ir)
}

// SetIn names the browser's audio stream.
func (r *Recorder) SetIn(ssrc uint32) {
	r.mu.Lock()
	r.in = ssrc
	r.mu.Unlock()
}

// SetOut names the reply's audio stream.
func (r *Recorder) SetOut(ssrc uint32) {
	r.mu.Lock()
	r.out = ssrc
	r.mu.Unlock()
}

// Snapshot reads the figures; the interceptor forgets a stream when the peer connection closes,
// so a call takes its last snapshot before that.
func (r *Recorder) Snapshot(id string) RTPStats {
	r.mu.Lock()
	g, in, out := r.getter, r.in, r.out
	r.mu.Unlock()
	s := RTPStats{CallID: id}
	if g == nil {
		return s
	}
	if in != 0 {
		if st := g.Get(in); st != nil {
			s.PacketsReceived = st.InboundRTPStreamStats.PacketsReceived
			s.PacketsLostIn = max(0, st.InboundRTPStreamStats.PacketsLost)
			s.BytesReceived = st.InboundRTPStreamStats.BytesReceived
			s.JitterIn = st.InboundRTPStreamStats.Jitter
		}
	}
	if out != 0 {
		if st := g.Get(out); st != nil {
			s.PacketsSent = st.OutboundRTPStreamStats.PacketsSent
			s.BytesSent = st.OutboundRTPStreamStats.BytesSent
			ri := st.RemoteInboundRTPStreamStats
			s.PacketsLostOut = max(0, ri.PacketsLost)
			s.JitterOut = ri.Jitter
			s.RTT = ri.RoundTripTime.Seconds()
			s.RTTMeasured = ri.RoundTripTimeMeasurements > 0
		}
	}
	return s
}
