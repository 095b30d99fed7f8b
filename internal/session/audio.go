package session

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// EngineRate is the input rate of the pipeline (stage 0: VAD + ASR) and OutputRate the talker's.
const (
	EngineRate = 16000
	OutputRate = 24000
)

// ErrBadAudio is returned for payloads that are not whole samples or not finite.
var ErrBadAudio = errors.New("bad audio")

// DecodeInput converts one wire audio payload to 16 kHz mono float32. It is a small, allocation-
// per-call converter: appends arrive at most a few dozen times per second per session.
func DecodeInput(data []byte, f AudioFormat) ([]float32, error) {
	var pcm []float32
	switch f.Type {
	case "pcm16":
		if len(data)%2 != 0 {
			return nil, fmt.Errorf("%w: pcm16 payload has an odd length (%d bytes)", ErrBadAudio, len(data))
		}
		pcm = make([]float32, len(data)/2)
		for i := range pcm {
			pcm[i] = float32(int16(binary.LittleEndian.Uint16(data[2*i:]))) / 32768
		}
	case "pcm_f32le":
		if len(data)%4 != 0 {
			return nil, fmt.Errorf("%w: pcm_f32le payload length %d is not a multiple of 4", ErrBadAudio, len(data))
		}
		pcm = make([]float32, len(data)/4)
		for i := range pcm {
			v := math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, fmt.Errorf("%w: non-finite sample at %d", ErrBadAudio, i)
			}
			pcm[i] = max(-1, min(1, v))
		}
	case "g711_ulaw":
		pcm = make([]float32, len(data))
		for i, b := range data {
			pcm[i] = float32(ulawDecode(b)) / 32768
		}
	case "g711_alaw":
		pcm = make([]float32, len(data))
		for i, b := range data {
			pcm[i] = float32(alawDecode(b)) / 32768
		}
	default:
		return nil, fmt.Errorf("%w: unsupported format %q", ErrBadAudio, f.Type)
	}
	return resampleLinear(pcm, f.Rate, EngineRate), nil
}

// EncodeOutput converts 24 kHz float32 talker audio to the session's output format.
func EncodeOutput(pcm []float32, f AudioFormat) []byte {
	switch f.Type {
	case "g711_ulaw", "g711_alaw":
		s := resampleLinear(pcm, OutputRate, 8000)
		out := make([]byte, len(s))
		for i, v := range s {
			if f.Type == "g711_ulaw" {
				out[i] = ulawEncode(toInt16(v))
			} else {
				out[i] = alawEncode(toInt16(v))
			}
		}
		return out
	default:
		out := make([]byte, 2*len(pcm))
		for i, v := range pcm {
			binary.LittleEndian.PutUint16(out[2*i:], uint16(toInt16(v)))
		}
		return out
	}
}

// OutputBytesPerMs is the byte rate of an output format, used to size pacing frames.
func OutputBytesPerMs(f AudioFormat) float64 {
	if f.Type == "g711_ulaw" || f.Type == "g711_alaw" {
		return 8
	}
	return 48
}

func toInt16(v float32) int16 {
	x := math.Round(float64(v) * 32767)
	return int16(max(-32768, min(32767, x)))
}

// resampleLinear is a stateless linear-interpolation resampler; chunk edges are joined well
// enough for ASR and VAD, which are the only consumers of resampled input.
func resampleLinear(src []float32, from, to int) []float32 {
	if from == to || len(src) == 0 {
		return src
	}
	n := int(int64(len(src)) * int64(to) / int64(from))
	out := make([]float32, n)
	step := float64(from) / float64(to)
	for i := range out {
		pos := float64(i) * step
		j := int(pos)
		frac := float32(pos - float64(j))
		a := src[min(j, len(src)-1)]
		b := src[min(j+1, len(src)-1)]
		out[i] = a + (b-a)*frac
	}
	return out
}

func ulawDecode(u byte) int16 {
	u = ^u
	t := (int(u&0x0F) << 3) + 0x84
	t <<= (u & 0x70) >> 4
	if u&0x80 != 0 {
		return int16(0x84 - t)
	}
	return int16(t - 0x84)
}

func alawDecode(a byte) int16 {
	a ^= 0x55
	t := int(a&0x0F) << 4
	seg := (a & 0x70) >> 4
	switch seg {
	case 0:
		t += 8
	case 1:
		t += 0x108
	default:
		t += 0x108
		t <<= seg - 1
	}
	if a&0x80 != 0 {
		return int16(t)
	}
	return int16(-t)
}

func ulawEncode(s int16) byte {
	const bias, clip = 0x84, 32635
	x := int(s)
	sign := 0
	if x < 0 {
		x = -x
		sign = 0x80
	}
	x = min(x, clip) + bias
	exp := 7
	for mask := 0x4000; x&mask == 0 && exp > 0; mask >>= 1 {
		exp--
	}
	mant := (x >> (exp + 3)) & 0x0F
	return ^byte(sign | exp<<4 | mant)
}

func alawEncode(s int16) byte {
	p := int(s) >> 3
	mask := 0xD5
	if p < 0 {
		mask = 0x55
		p = -p - 1
	}
	segEnd := [8]int{0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF}
	seg := 0
	for seg < 8 && p > segEnd[seg] {
		seg++
	}
	if seg >= 8 {
		return byte(0x7F ^ mask)
	}
	v := seg << 4
	if seg < 2 {
		v |= (p >> 1) & 0x0F
	} else {
		v |= (p >> seg) & 0x0F
	}
	return byte(v ^ mask)
}
