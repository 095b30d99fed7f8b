package media

import (
	"fmt"
	"strings"

	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/speech"
)

// Codec is a call's audio codec: Opus (48 kHz RTP clock), or G.711 µ-law / A-law (PCMU,
// PCMA: 8 kHz) for a client that offers no Opus (SIP gateways, old softphones).
type Codec struct {
	cap     webrtc.RTPCodecCapability
	pt      webrtc.PayloadType
	law     byte // 0 for Opus, 'u' or 'a'
	clock   int  // RTP clock rate
	perTick int  // RTP timestamp units per 20 ms frame
}

var (
	CodecOpus = Codec{cap: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2,
		SDPFmtpLine: "minptime=10;useinbandfec=1"}, pt: 111, clock: 48000, perTick: rtcFrameSamples}
	CodecPCMU = Codec{cap: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypePCMU, ClockRate: 8000, Channels: 1}, pt: 0,
		law: 'u', clock: 8000, perTick: 160}
	CodecPCMA = Codec{cap: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypePCMA, ClockRate: 8000, Channels: 1}, pt: 8,
		law: 'a', clock: 8000, perTick: 160}
	Codecs = []Codec{CodecOpus, CodecPCMU, CodecPCMA} // in order of preference
)

// OfferCodec picks the call's codec from the offer's first audio m-line: Opus when offered, else
// PCMU, else PCMA; false when it offers none of them.
func OfferCodec(d *sdp.SessionDescription) (Codec, bool) {
	for _, m := range d.MediaDescriptions {
		if m.MediaName.Media != "audio" {
			continue
		}
		offered := map[string]bool{}
		for _, a := range m.Attributes {
			if a.Key != "rtpmap" {
				continue
			}
			// "111 opus/48000/2"
			if _, enc, ok := strings.Cut(a.Value, " "); ok {
				name, _, _ := strings.Cut(enc, "/")
				offered[strings.ToLower(name)] = true
			}
		}
		for _, f := range m.MediaName.Formats { // static payload types need no rtpmap
			switch f {
			case "0":
				offered["pcmu"] = true
			case "8":
				offered["pcma"] = true
			}
		}
		for _, c := range Codecs {
			if offered[strings.ToLower(strings.TrimPrefix(c.cap.MimeType, "audio/"))] {
				return c, true
			}
		}
		return Codec{}, false
	}
	return Codec{}, false
}

// frameEncoder encodes one 20 ms frame of 48 kHz mono PCM16 into an RTP payload.
type frameEncoder interface {
	Encode(pcm48 []int16, out []byte) (int, error)
	Close()
}

// frameDecoder decodes one RTP payload (nil: a lost packet, concealed) to 24 kHz mono PCM16.
type frameDecoder interface {
	Decode(payload []byte, pcm24 []int16) (int, error)
	MaxFrameSamples() int
	Close()
}

func (c Codec) newEncoder() (frameEncoder, error) {
	if c.law == 0 {
		// CELT-only: 4 ms less algorithmic delay than VoIP mode, the same intelligibility at
		// 32 kbit/s (internal/speech's TestOpusLowDelaySpeech).
		return speech.NewOpusEncoderMode(48000, 32000, speech.OpusLowDelay)
	}
	rs, err := audio.NewResampler(48000, 8000)
	if err != nil {
		return nil, fmt.Errorf("g711 encoder: %w", err)
	}
	return &g711Encoder{law: c.law, rs: rs}, nil
}

func (c Codec) newDecoder() (frameDecoder, error) {
	if c.law == 0 {
		return speech.NewOpusDecoder(24000)
	}
	rs, err := audio.NewResampler(8000, 24000)
	if err != nil {
		return nil, fmt.Errorf("g711 decoder: %w", err)
	}
	return &g711Decoder{law: c.law, rs: rs}, nil
}

// g711Encoder resamples 48 kHz to 8 kHz (streaming, so frame edges are seamless) and
// companders.
type g711Encoder struct {
	law byte
	rs  *audio.Resampler
	f   []float32
	o   []float32
}

func (e *g711Encoder) Encode(pcm48 []int16, out []byte) (int, error) {
	e.f = audio.Int16ToFloat32(e.f[:0], pcm48)
	e.o = e.rs.Process(e.o[:0], e.f)
	var b []byte
	if e.law == 'u' {
		b = audio.Float32ToULaw(out[:0], e.o)
	} else {
		b = audio.Float32ToALaw(out[:0], e.o)
	}
	if len(b) > len(out) {
		return 0, fmt.Errorf("g711 frame of %d bytes exceeds the %d-byte buffer", len(b), len(out))
	}
	return len(b), nil
}

func (e *g711Encoder) Close() {}

// g711Decoder expands G.711 and resamples 8 kHz to 24 kHz; a lost packet is 20 ms of silence.
type g711Decoder struct {
	law byte
	rs  *audio.Resampler
	f   []float32
	o   []float32
	tmp []int16
}

func (d *g711Decoder) Decode(payload []byte, pcm24 []int16) (int, error) {
	switch {
	case payload == nil:
		d.f = append(d.f[:0], make([]float32, 160)...)
	case d.law == 'u':
		d.f = audio.ULawToFloat32(d.f[:0], payload)
	default:
		d.f = audio.ALawToFloat32(d.f[:0], payload)
	}
	d.o = d.rs.Process(d.o[:0], d.f)
	d.tmp = audio.Float32ToInt16(d.tmp[:0], d.o)
	if len(d.tmp) > len(pcm24) {
		return 0, fmt.Errorf("g711 payload of %d samples exceeds the %d-sample buffer", len(payload), len(pcm24))
	}
	return copy(pcm24, d.tmp), nil
}

// MaxFrameSamples is 120 ms at 24 kHz, as for Opus.
func (d *g711Decoder) MaxFrameSamples() int { return 24000 * 120 / 1000 }

func (d *g711Decoder) Close() {}

// Capability is the codec as the call's media engine and outbound track register it.
func (c Codec) Capability() webrtc.RTPCodecCapability { return c.cap }

// PayloadType is the codec's RTP payload type.
func (c Codec) PayloadType() webrtc.PayloadType { return c.pt }
