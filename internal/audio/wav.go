package audio

import (
	"encoding/binary"
	"fmt"
	"math"
)

const (
	wavPCM        = 1
	wavFloat      = 3
	wavALaw       = 6
	wavULaw       = 7
	wavExtensible = 0xFFFE
	wavMaxChans   = 64
	wavMaxRate    = 384000
)

// EncodeWAV returns a mono 16-bit PCM RIFF/WAVE file holding pcm at rate Hz.
func EncodeWAV(pcm []float32, rate int) []byte {
	data := 2 * len(pcm)
	b := make([]byte, 44+data)
	copy(b[0:], "RIFF")
	binary.LittleEndian.PutUint32(b[4:], uint32(36+data))
	copy(b[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(b[16:], 16)
	binary.LittleEndian.PutUint16(b[20:], wavPCM)
	binary.LittleEndian.PutUint16(b[22:], 1)
	binary.LittleEndian.PutUint32(b[24:], uint32(rate))
	binary.LittleEndian.PutUint32(b[28:], uint32(rate*2))
	binary.LittleEndian.PutUint16(b[32:], 2)
	binary.LittleEndian.PutUint16(b[34:], 16)
	copy(b[36:], "data")
	binary.LittleEndian.PutUint32(b[40:], uint32(data))
	Float32ToPCM16Bytes(b[44:], pcm)
	return b
}

type wavFormat struct {
	tag      uint16
	channels int
	rate     int
	bits     int
}

// DecodeWAV reads a RIFF/WAVE file: integer PCM (8/16/24/32 bit), IEEE float (32/64 bit),
// G.711 A-law or µ-law, plain or WAVE_FORMAT_EXTENSIBLE. Multi-channel audio is downmixed to
// mono by averaging. A data chunk whose declared size runs past the end (as streaming writers
// leave it) is read up to the last whole frame.
func DecodeWAV(b []byte) (samples []float32, rate int, err error) {
	if len(b) < 12 || string(b[0:4]) != "RIFF" || string(b[8:12]) != "WAVE" {
		return nil, 0, fmt.Errorf("reading header: %w", ErrInvalidWAV)
	}
	var f *wavFormat
	for off := 12; off+8 <= len(b); {
		id := string(b[off : off+4])
		size := int(binary.LittleEndian.Uint32(b[off+4:]))
		body := b[off+8:]
		if size < 0 || size > len(body) {
			if id != "data" {
				return nil, 0, fmt.Errorf("reading chunk %q: size %d past end: %w", id, size, ErrInvalidWAV)
			}
			size = len(body)
		}
		body = body[:size]
		switch id {
		case "fmt ":
			ff, err := parseFmt(body)
			if err != nil {
				return nil, 0, err
			}
			f = &ff
		case "data":
			if f == nil {
				return nil, 0, fmt.Errorf("reading data before fmt chunk: %w", ErrInvalidWAV)
			}
			s, err := decodeSamples(*f, body)
			if err != nil {
				return nil, 0, err
			}
			return s, f.rate, nil
		}
		off += 8 + size + size&1 // chunks are padded to even sizes
	}
	return nil, 0, fmt.Errorf("reading chunks: no data chunk: %w", ErrInvalidWAV)
}

func parseFmt(b []byte) (wavFormat, error) {
	if len(b) < 16 {
		return wavFormat{}, fmt.Errorf("reading fmt chunk of %d bytes: %w", len(b), ErrInvalidWAV)
	}
	f := wavFormat{
		tag:      binary.LittleEndian.Uint16(b[0:]),
		channels: int(binary.LittleEndian.Uint16(b[2:])),
		rate:     int(binary.LittleEndian.Uint32(b[4:])),
		bits:     int(binary.LittleEndian.Uint16(b[14:])),
	}
	if f.tag == wavExtensible {
		if len(b) < 40 {
			return wavFormat{}, fmt.Errorf("reading extensible fmt chunk of %d bytes: %w", len(b), ErrInvalidWAV)
		}
		f.tag = binary.LittleEndian.Uint16(b[24:]) // first two bytes of the sub-format GUID
	}
	if f.channels < 1 || f.channels > wavMaxChans {
		return wavFormat{}, fmt.Errorf("reading fmt: %d channels: %w", f.channels, ErrInvalidWAV)
	}
	if f.rate < 1 || f.rate > wavMaxRate {
		return wavFormat{}, fmt.Errorf("reading fmt: rate %d: %w", f.rate, ErrUnsupportedRate)
	}
	ok := false
	switch f.tag {
	case wavPCM:
		ok = f.bits == 8 || f.bits == 16 || f.bits == 24 || f.bits == 32
	case wavFloat:
		ok = f.bits == 32 || f.bits == 64
	case wavALaw, wavULaw:
		ok = f.bits == 8
	}
	if !ok {
		return wavFormat{}, fmt.Errorf("reading fmt: format %#x with %d bits: %w", f.tag, f.bits, ErrInvalidWAV)
	}
	return f, nil
}

func decodeSamples(f wavFormat, b []byte) ([]float32, error) {
	width := f.bits / 8
	frame := width * f.channels
	n := len(b) / frame
	if n == 0 {
		return nil, fmt.Errorf("reading data: %w", ErrEmptyAudio)
	}
	out := make([]float32, n)
	inv := 1 / float64(f.channels)
	for i := range n {
		var sum float64
		for c := range f.channels {
			p := b[i*frame+c*width:]
			var v float64
			switch {
			case f.tag == wavALaw:
				v = float64(alawDecode[p[0]])
			case f.tag == wavULaw:
				v = float64(ulawDecode[p[0]])
			case f.tag == wavFloat && width == 4:
				v = float64(math.Float32frombits(binary.LittleEndian.Uint32(p)))
			case f.tag == wavFloat:
				v = math.Float64frombits(binary.LittleEndian.Uint64(p))
			case width == 1:
				v = (float64(p[0]) - 128) / 128 // 8-bit PCM is unsigned
			case width == 2:
				v = float64(int16(binary.LittleEndian.Uint16(p))) / 32768
			case width == 3:
				v = float64(int32(uint32(p[0])<<8|uint32(p[1])<<16|uint32(p[2])<<24)) / (1 << 31)
			default:
				v = float64(int32(binary.LittleEndian.Uint32(p))) / (1 << 31)
			}
			sum += v
		}
		out[i] = float32(sum * inv)
	}
	if err := CheckFinite(out); err != nil {
		return nil, fmt.Errorf("reading float data: %w", err)
	}
	return out, nil
}
