package media

import (
	"encoding/binary"
	"errors"
	"net"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/rtp"
	"go.uber.org/zap"
)

// rtpQuietAfter is how long without a packet from the browser means it sends nothing for now
// (Opus DTX, or a source it found silent): the input's time still passes, so a session whose
// VAD listens sees the pause as silence instead of waiting for the next packet to end the
// user's turn. Without a VAD nothing is added: a commit takes exactly the audio received.
const rtpQuietAfter = 100 * time.Millisecond

// RTPReader is the browser's audio track (webrtc.TrackRemote).
type RTPReader interface {
	ReadRTP() (*rtp.Packet, interceptor.Attributes, error)
	SetReadDeadline(t time.Time) error
}

// Input is where the decoded microphone audio goes (the call, which appends it to the session).
type Input interface {
	// Listens reports whether the session's VAD listens: only then is time without packets
	// silence.
	Listens() bool
	// Take takes 24 kHz PCM16; false ends the receiver (the session has ended).
	Take(pcm []byte) bool
}

// Receive decodes the browser's RTP (Opus, or G.711) to 24 kHz PCM16 and hands it to in, one
// packet's audio at a time, until the track ends. A gap in the sequence numbers is concealed
// (PLC); a gap in time (no packet for rtpQuietAfter, or a timestamp jump when packets resume
// after a DTX pause) is handed over as silence, each span once, while the session's VAD listens.
func Receive(t RTPReader, codec Codec, in Input, log *zap.Logger) {
	dec, err := codec.newDecoder()
	if err != nil {
		log.Error("audio decoder", zap.Error(err))
		return
	}
	defer dec.Close()
	r := receiver{dec: dec, codec: codec, in: in, log: log, pcm: make([]int16, dec.MaxFrameSamples())}
	for {
		if r.have {
			_ = t.SetReadDeadline(time.Now().Add(rtpQuietAfter))
		}
		pkt, _, err := t.ReadRTP()
		var ok bool
		if err != nil {
			ok = r.quiet(err)
		} else {
			ok = r.packet(pkt)
		}
		if !ok {
			return
		}
	}
}

// receiver is Receive's state between packets.
type receiver struct {
	dec   frameDecoder
	codec Codec
	in    Input
	log   *zap.Logger
	pcm   []int16
	buf   []byte // this packet's audio (with concealed losses or silence before it)

	lastSeq uint16
	lastTS  uint32
	have    bool
	gaps    quietFill
}

// quiet handles a read that failed: a timeout after the first packet is a pause (silence while
// the VAD listens); anything else ends the track.
func (r *receiver) quiet(err error) bool {
	if ne := net.Error(nil); !r.have || !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	if r.in.Listens() {
		r.buf = appendSilence(r.buf, r.gaps.quiet(time.Now()))
	}
	return len(r.buf) == 0 || r.take()
}

// packet decodes one packet, after concealing the packets lost before it and the pause a
// timestamp jump says was not sent.
func (r *receiver) packet(pkt *rtp.Packet) bool {
	if r.have {
		lost := int(pkt.SequenceNumber - r.lastSeq - 1)
		for gap := lost; gap > 0 && gap < 10; gap-- {
			n, err := r.dec.Decode(nil, r.pcm)
			if err == nil {
				r.buf = appendPCM(r.buf, r.pcm[:n])
			}
		}
		// The timestamps cover the lost packets too: what is beyond them was not sent.
		if lost >= 0 && lost < 10 && r.in.Listens() {
			span := time.Duration(int64(pkt.Timestamp-r.lastTS)-int64(lost+1)*int64(r.codec.perTick)) * time.Second / time.Duration(r.codec.clock)
			r.buf = appendSilence(r.buf, r.gaps.resumed(span))
		}
	}
	r.have, r.lastSeq, r.lastTS = true, pkt.SequenceNumber, pkt.Timestamp
	r.gaps.packet(time.Now())
	n, err := r.dec.Decode(pkt.Payload, r.pcm)
	if err != nil {
		r.log.Debug("audio decode", zap.Error(err))
		return true
	}
	r.buf = appendPCM(r.buf, r.pcm[:n])
	return r.take()
}

func (r *receiver) take() bool {
	ok := r.in.Take(r.buf)
	r.buf = r.buf[:0]
	return ok
}

// quietFill keeps the silence appended for a pause in the browser's packets, so that each span
// of time is appended once: while no packet comes (quiet, by the clock) and when packets resume
// after a timestamp jump (resumed, by the RTP clock), whichever sees it first.
type quietFill struct {
	lastAt time.Time     // arrival of the last packet
	filled time.Duration // silence appended since it
}

const rtpFrame = 20 * time.Millisecond

// packet records a packet's arrival: a new pause starts from it.
func (q *quietFill) packet(now time.Time) { q.lastAt, q.filled = now, 0 }

// quiet is the silence to append now, no packet having come since the last one: the time since
// it, beyond that packet's own frame and what was already appended, in whole frames.
func (q *quietFill) quiet(now time.Time) time.Duration {
	d := (now.Sub(q.lastAt) - rtpFrame - q.filled).Truncate(rtpFrame)
	if d <= 0 {
		return 0
	}
	q.filled += d
	return d
}

// resumed is the silence to append before a packet whose timestamp is span past the end of the
// last one (a DTX pause): what quiet has not appended already, in whole frames.
func (q *quietFill) resumed(span time.Duration) time.Duration {
	d := (span - q.filled).Truncate(rtpFrame)
	if d <= 0 {
		return 0
	}
	q.filled += d
	return d
}

// appendSilence appends d of 24 kHz PCM16 silence.
func appendSilence(b []byte, d time.Duration) []byte {
	return append(b, make([]byte, 2*int(d*24000/time.Second))...)
}

func appendPCM(b []byte, pcm []int16) []byte {
	for _, v := range pcm {
		b = binary.LittleEndian.AppendUint16(b, uint16(v))
	}
	return b
}
