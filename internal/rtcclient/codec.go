package rtcclient

import (
	"fmt"
	"strings"

	"github.com/pion/interceptor"
	"github.com/pion/interceptor/pkg/stats"
	"github.com/pion/webrtc/v4"

	"github.com/omniserve/omniserve/internal/audio"
	"github.com/omniserve/omniserve/internal/speech"
)

// The codecs a call may offer: Opus (a browser's default, with its other codecs) or G.711 alone
// (a client that simulates a telephone, as openai-realtime-agents does with setCodecPreferences).
const (
	CodecOpus = "opus"
	CodecPCMU = "pcmu"
	CodecPCMA = "pcma"
)

// codecCapability is the RTP capability of a codec name ("" is Opus).
func codecCapability(name string) (webrtc.RTPCodecCapability, webrtc.PayloadType, error) {
	switch strings.ToLower(name) {
	case "", CodecOpus:
		return webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, 111, nil
	case CodecPCMU:
		return webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypePCMU, ClockRate: 8000, Channels: 1}, 0, nil
	case CodecPCMA:
		return webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypePCMA, ClockRate: 8000, Channels: 1}, 8, nil
	}
	return webrtc.RTPCodecCapability{}, 0, fmt.Errorf("rtcclient: unknown codec %q (opus, pcmu or pcma)", name)
}

// newPeerConnection is a peer that offers the configured codec: pion's defaults for Opus, the
// one G.711 codec otherwise; pion's default interceptors either way, its statistics delivered to
// setStats (registered first, so that it sees the sender reports the report interceptor writes
// and can match the server's receiver reports to them: the round trip).
func newPeerConnection(codec string, setStats func(stats.Getter)) (*webrtc.PeerConnection, error) {
	capab, pt, err := codecCapability(codec)
	if err != nil {
		return nil, err
	}
	m := &webrtc.MediaEngine{}
	if capab.MimeType == webrtc.MimeTypeOpus {
		err = m.RegisterDefaultCodecs()
	} else {
		err = m.RegisterCodec(webrtc.RTPCodecParameters{RTPCodecCapability: capab, PayloadType: pt}, webrtc.RTPCodecTypeAudio)
	}
	if err != nil {
		return nil, fmt.Errorf("rtcclient: codecs: %w", err)
	}
	ir := &interceptor.Registry{}
	sf, err := stats.NewInterceptor()
	if err != nil {
		return nil, fmt.Errorf("rtcclient: interceptors: %w", err)
	}
	sf.OnNewPeerConnection(func(_ string, g stats.Getter) { setStats(g) })
	ir.Add(sf)
	for _, f := range []func() error{
		func() error { return webrtc.ConfigureNack(m, ir) },
		func() error { return webrtc.ConfigureRTCPReports(ir) },
		func() error { return webrtc.ConfigureSimulcastExtensionHeaders(m) },
		func() error { return webrtc.ConfigureTWCCSender(m, ir) },
	} {
		if err := f(); err != nil {
			return nil, fmt.Errorf("rtcclient: interceptors: %w", err)
		}
	}
	return webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(ir)).NewPeerConnection(webrtc.Configuration{})
}

// encoder encodes one 20 ms frame of mono PCM16 into a packet.
type encoder interface {
	FrameSamples() int
	Encode(pcm []int16, out []byte) (int, error)
	Close()
}

// g711 is G.711 at 8 kHz, both ways.
type g711 struct{ alaw bool }

func (g711) FrameSamples() int { return 8000 * speech.OpusFrameMs / 1000 }

func (g g711) Encode(pcm []int16, out []byte) (int, error) {
	f := audio.Int16ToFloat32(nil, pcm)
	var b []byte
	if g.alaw {
		b = audio.Float32ToALaw(nil, f)
	} else {
		b = audio.Float32ToULaw(nil, f)
	}
	if len(b) > len(out) {
		return 0, fmt.Errorf("rtcclient: G.711 frame of %d bytes, buffer %d", len(b), len(out))
	}
	return copy(out, b), nil
}

func (g711) Close() {}

func (g g711) Decode(packet []byte, pcm []int16) (int, error) {
	var f []float32
	if g.alaw {
		f = audio.ALawToFloat32(nil, packet)
	} else {
		f = audio.ULawToFloat32(nil, packet)
	}
	if len(f) > len(pcm) {
		return 0, fmt.Errorf("rtcclient: G.711 packet of %d samples, buffer %d", len(f), len(pcm))
	}
	return len(audio.Float32ToInt16(pcm[:0], f)), nil
}

// newEncoder is the microphone's encoder for the call's codec; G.711 takes 8 kHz PCM.
func newEncoder(codec string, rate int) (encoder, error) {
	switch strings.ToLower(codec) {
	case CodecPCMU, CodecPCMA:
		if rate != 8000 {
			return nil, fmt.Errorf("rtcclient: G.711 takes 8000 Hz PCM, not %d (Config.MicRate)", rate)
		}
		return g711{alaw: strings.EqualFold(codec, CodecPCMA)}, nil
	}
	return speech.NewOpusEncoder(rate, 32000)
}

// decoder decodes one received packet into mono PCM16; rate is its output rate.
type decoder interface {
	Decode(packet []byte, pcm []int16) (int, error)
	Close()
}

// newDecoder is the decoder of a received track's codec (nil, 0 for one it does not know).
func newDecoder(mime string, outRate int) (decoder, int, error) {
	switch strings.ToLower(mime) {
	case strings.ToLower(webrtc.MimeTypeOpus):
		d, err := speech.NewOpusDecoder(outRate)
		return d, outRate, err
	case strings.ToLower(webrtc.MimeTypePCMU):
		return g711{}, 8000, nil
	case strings.ToLower(webrtc.MimeTypePCMA):
		return g711{alaw: true}, 8000, nil
	}
	return nil, 0, nil
}
