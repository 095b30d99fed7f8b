package audio

import (
	"encoding/binary"
	"fmt"
	"math"
)

// grow returns s resized to n, reusing its storage when the capacity allows.
func grow[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

// PCM16BytesToFloat32 decodes little-endian signed 16-bit PCM into dst.
func PCM16BytesToFloat32(dst []float32, src []byte) ([]float32, error) {
	if len(src)%2 != 0 {
		return dst[:0], fmt.Errorf("decoding %d bytes: %w", len(src), ErrOddLength)
	}
	n := len(src) / 2
	dst = grow(dst, n)
	for i := range n {
		dst[i] = float32(int16(binary.LittleEndian.Uint16(src[2*i:]))) / 32768
	}
	return dst, nil
}

// Float32ToPCM16Bytes encodes samples as little-endian signed 16-bit PCM into dst,
// clipping to [-1, 1]; NaN encodes as 0.
func Float32ToPCM16Bytes(dst []byte, src []float32) []byte {
	dst = grow(dst, 2*len(src))
	for i, v := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], uint16(toInt16(v)))
	}
	return dst
}

// Int16ToFloat32 scales int16 samples to [-1, 1).
func Int16ToFloat32(dst []float32, src []int16) []float32 {
	dst = grow(dst, len(src))
	for i, v := range src {
		dst[i] = float32(v) / 32768
	}
	return dst
}

// Float32ToInt16 scales samples to int16, clipping; NaN becomes 0.
func Float32ToInt16(dst []int16, src []float32) []int16 {
	dst = grow(dst, len(src))
	for i, v := range src {
		dst[i] = toInt16(v)
	}
	return dst
}

func toInt16(v float32) int16 {
	// Scale by 32768 and clip, so that -1 maps to -32768 and +1 saturates at 32767;
	// rounding keeps a PCM16 → float32 → PCM16 round trip exact.
	x := float64(v) * 32768
	switch {
	case x != x: // NaN
		return 0
	case x >= 32767:
		return 32767
	case x <= -32768:
		return -32768
	}
	return int16(math.RoundToEven(x))
}

// CheckFinite returns ErrNonFinite (with the index) if any sample is NaN or ±Inf.
func CheckFinite(samples []float32) error {
	for i, v := range samples {
		// v-v is NaN for both NaN and ±Inf, and 0 for every finite value.
		if f := v - v; f != f {
			return fmt.Errorf("sample %d is %v: %w", i, v, ErrNonFinite)
		}
	}
	return nil
}
