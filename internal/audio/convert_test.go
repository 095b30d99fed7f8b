package audio

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPCM16RoundTrip(t *testing.T) {
	src := []byte{0x00, 0x00, 0xff, 0x7f, 0x00, 0x80, 0x01, 0x00, 0xff, 0xff}
	f, err := PCM16BytesToFloat32(nil, src)
	require.NoError(t, err)
	require.Equal(t, []float32{0, 32767.0 / 32768, -1, 1.0 / 32768, -1.0 / 32768}, f)
	require.Equal(t, src, Float32ToPCM16Bytes(nil, f))

	_, err = PCM16BytesToFloat32(nil, []byte{1, 2, 3})
	require.ErrorIs(t, err, ErrOddLength)
}

func TestFloat32ToInt16Clips(t *testing.T) {
	got := Float32ToInt16(nil, []float32{2, -2, 1, -1, 0.5, float32(math.NaN()), float32(math.Inf(1))})
	require.Equal(t, []int16{32767, -32768, 32767, -32768, 16384, 0, 32767}, got)
	back := Int16ToFloat32(nil, []int16{-32768, 0, 16384})
	require.Equal(t, []float32{-1, 0, 0.5}, back)
}

func TestCheckFinite(t *testing.T) {
	require.NoError(t, CheckFinite([]float32{0, 1, -1, math.MaxFloat32}))
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		require.ErrorIs(t, CheckFinite([]float32{0, float32(bad)}), ErrNonFinite)
	}
}

func TestG711(t *testing.T) {
	// Reference points of ITU-T G.711: silence encodes to 0xFF (µ-law) and 0xD5 (A-law).
	require.Equal(t, []byte{0xFF}, Float32ToULaw(nil, []float32{0}))
	require.Equal(t, []byte{0xD5}, Float32ToALaw(nil, []float32{0}))
	require.Equal(t, []byte{0x80}, Float32ToULaw(nil, []float32{1}))
	require.Equal(t, []byte{0xAA}, Float32ToALaw(nil, []float32{1}))

	// Every code decodes and re-encodes to itself (µ-law's two zeros aside).
	for c := range 256 {
		b := []byte{byte(c)}
		u := ULawToFloat32(nil, b)
		if c != 0x7F {
			require.Equal(t, b, Float32ToULaw(nil, u), "µ-law code %#x", c)
		}
		a := ALawToFloat32(nil, b)
		require.Equal(t, b, Float32ToALaw(nil, a), "A-law code %#x", c)
	}
	// Companding error stays within one quantisation step (about 3% of the value above 0.01).
	for _, v := range []float32{0.9, -0.5, 0.1, -0.03, 0.012} {
		u := ULawToFloat32(nil, Float32ToULaw(nil, []float32{v}))[0]
		a := ALawToFloat32(nil, Float32ToALaw(nil, []float32{v}))[0]
		require.InDelta(t, v, u, math.Abs(float64(v))*0.07, "µ-law %v", v)
		require.InDelta(t, v, a, math.Abs(float64(v))*0.07, "A-law %v", v)
	}
}

func TestConversionsDoNotAllocate(t *testing.T) {
	f := make([]float32, 480)
	for i := range f {
		f[i] = float32(math.Sin(float64(i) / 10))
	}
	b := make([]byte, 0, 960)
	i16 := make([]int16, 0, 480)
	ff := make([]float32, 0, 480)
	g := make([]byte, 0, 480)
	allocs := testing.AllocsPerRun(50, func() {
		b = Float32ToPCM16Bytes(b, f)
		ff, _ = PCM16BytesToFloat32(ff, b)
		i16 = Float32ToInt16(i16, ff)
		ff = Int16ToFloat32(ff, i16)
		g = Float32ToULaw(g, ff)
		ff = ULawToFloat32(ff, g)
		g = Float32ToALaw(g, ff)
		ff = ALawToFloat32(ff, g)
		_ = CheckFinite(ff)
	})
	require.Zero(t, allocs)
}
