package audio

import "math/bits"

// G.711 companding (ITU-T G.711), as the realtime API's g711_ulaw and g711_alaw formats use it.
// Decoding goes through 256-entry tables built once; they are read-only after package init.
var (
	ulawDecode = buildTable(ulawToInt16)
	alawDecode = buildTable(alawToInt16)
)

func buildTable(f func(byte) int16) (t [256]float32) {
	for i := range t {
		t[i] = float32(f(byte(i))) / 32768
	}
	return t
}

// ULawToFloat32 decodes G.711 µ-law bytes into dst.
func ULawToFloat32(dst []float32, src []byte) []float32 {
	dst = grow(dst, len(src))
	for i, b := range src {
		dst[i] = ulawDecode[b]
	}
	return dst
}

// ALawToFloat32 decodes G.711 A-law bytes into dst.
func ALawToFloat32(dst []float32, src []byte) []float32 {
	dst = grow(dst, len(src))
	for i, b := range src {
		dst[i] = alawDecode[b]
	}
	return dst
}

// Float32ToULaw encodes samples as G.711 µ-law into dst.
func Float32ToULaw(dst []byte, src []float32) []byte {
	dst = grow(dst, len(src))
	for i, v := range src {
		dst[i] = int16ToULaw(toInt16(v))
	}
	return dst
}

// Float32ToALaw encodes samples as G.711 A-law into dst.
func Float32ToALaw(dst []byte, src []float32) []byte {
	dst = grow(dst, len(src))
	for i, v := range src {
		dst[i] = int16ToALaw(toInt16(v))
	}
	return dst
}

const (
	ulawBias = 0x84
	ulawClip = 32635
)

func int16ToULaw(s int16) byte {
	p := int(s)
	var sign byte
	if p < 0 {
		sign = 0x80
		p = -p
	}
	p = min(p, ulawClip) + ulawBias
	exp := bits.Len(uint(p>>7)) - 1 // p>>7 is in [1, 255]
	mant := (p >> (exp + 3)) & 0x0F
	return ^(sign | byte(exp<<4) | byte(mant))
}

func ulawToInt16(u byte) int16 {
	u = ^u
	exp := int(u>>4) & 7
	mant := int(u & 0x0F)
	s := (((mant << 3) + ulawBias) << exp) - ulawBias
	if u&0x80 != 0 {
		s = -s
	}
	return int16(s)
}

func int16ToALaw(s int16) byte {
	p := int(s) >> 3 // A-law works on 13 bits
	mask := byte(0xD5)
	if p < 0 {
		mask = 0x55
		p = -p - 1
	}
	seg := 0
	for seg < 8 && p > (0x20<<seg)-1 {
		seg++
	}
	if seg >= 8 {
		return 0x7F ^ mask
	}
	a := byte(seg << 4)
	if seg < 2 {
		a |= byte(p>>1) & 0x0F
	} else {
		a |= byte(p>>seg) & 0x0F
	}
	return a ^ mask
}

func alawToInt16(a byte) int16 {
	a ^= 0x55
	t := int(a&0x0F) << 4
	seg := int(a&0x70) >> 4
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
