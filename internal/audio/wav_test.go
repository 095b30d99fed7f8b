package audio

import (
	"encoding/binary"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWAVRoundTrip(t *testing.T) {
	in := []float32{0, 0.5, -0.5, 32767.0 / 32768, -1}
	out, rate, err := DecodeWAV(EncodeWAV(in, 24000))
	require.NoError(t, err)
	require.Equal(t, 24000, rate)
	require.Equal(t, in, out)
}

// wavFile builds a WAV with an arbitrary fmt chunk, plus an unknown chunk before data.
func wavFile(tag uint16, channels, rate, bits int, data []byte) []byte {
	fmtc := make([]byte, 16)
	binary.LittleEndian.PutUint16(fmtc[0:], tag)
	binary.LittleEndian.PutUint16(fmtc[2:], uint16(channels))
	binary.LittleEndian.PutUint32(fmtc[4:], uint32(rate))
	binary.LittleEndian.PutUint32(fmtc[8:], uint32(rate*channels*bits/8))
	binary.LittleEndian.PutUint16(fmtc[12:], uint16(channels*bits/8))
	binary.LittleEndian.PutUint16(fmtc[14:], uint16(bits))
	b := []byte("RIFF\x00\x00\x00\x00WAVE")
	chunk := func(id string, body []byte) {
		b = append(b, id...)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(body)))
		b = append(b, body...)
		if len(body)%2 == 1 {
			b = append(b, 0)
		}
	}
	chunk("fmt ", fmtc)
	chunk("LIST", []byte("odd"))
	chunk("data", data)
	return b
}

func TestDecodeWAVFormats(t *testing.T) {
	f32 := func(vs ...float32) (b []byte) {
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		return b
	}
	tests := []struct {
		name string
		file []byte
		want []float32
		rate int
	}{
		{"pcm8", wavFile(1, 1, 8000, 8, []byte{128, 192, 0}), []float32{0, 0.5, -1}, 8000},
		{"pcm16 stereo downmix", wavFile(1, 2, 16000, 16, []byte{0x00, 0x40, 0x00, 0x00}), []float32{0.25}, 16000},
		{"pcm24", wavFile(1, 1, 48000, 24, []byte{0x00, 0x00, 0x40}), []float32{0.5}, 48000},
		{"pcm32", wavFile(1, 1, 48000, 32, []byte{0, 0, 0, 0xC0}), []float32{-0.5}, 48000},
		{"float32", wavFile(3, 1, 24000, 32, f32(0.25, -0.75)), []float32{0.25, -0.75}, 24000},
		{"ulaw", wavFile(7, 1, 8000, 8, []byte{0xFF}), []float32{0}, 8000},
		{"alaw", wavFile(6, 1, 8000, 8, []byte{0xD5}), []float32{8.0 / 32768}, 8000},
		{"truncated data", wavFile(1, 1, 16000, 16, []byte{0, 0x40, 0})[:0], nil, 0},
	}
	tests[len(tests)-1].file = func() []byte {
		b := wavFile(1, 1, 16000, 16, []byte{0, 0x40, 0, 0x40})
		binary.LittleEndian.PutUint32(b[len(b)-8:], 0xFFFFFFFF) // streaming writers leave the size open
		return b
	}()
	tests[len(tests)-1].want, tests[len(tests)-1].rate = []float32{0.5, 0.5}, 16000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, rate, err := DecodeWAV(tt.file)
			require.NoError(t, err)
			require.Equal(t, tt.rate, rate)
			require.InDeltaSlice(t, tt.want, got, 1e-6)
		})
	}
}

func TestDecodeWAVErrors(t *testing.T) {
	nan := binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(math.NaN())))
	tests := []struct {
		name string
		file []byte
		err  error
	}{
		{"empty", nil, ErrInvalidWAV},
		{"not riff", []byte("RIFX\x00\x00\x00\x00WAVE"), ErrInvalidWAV},
		{"no data", wavFile(1, 1, 16000, 16, nil)[:36], ErrInvalidWAV},
		{"no samples", wavFile(1, 1, 16000, 16, nil), ErrEmptyAudio},
		{"half a sample", wavFile(1, 1, 16000, 16, []byte{1}), ErrEmptyAudio},
		{"zero channels", wavFile(1, 0, 16000, 16, []byte{0, 0}), ErrInvalidWAV},
		{"zero rate", wavFile(1, 1, 0, 16, []byte{0, 0}), ErrUnsupportedRate},
		{"12 bit", wavFile(1, 1, 16000, 12, []byte{0, 0}), ErrInvalidWAV},
		{"mp3", wavFile(0x55, 1, 16000, 16, []byte{0, 0}), ErrInvalidWAV},
		{"nan float", wavFile(3, 1, 16000, 32, nan), ErrNonFinite},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := DecodeWAV(tt.file)
			require.ErrorIs(t, err, tt.err)
		})
	}
}

func FuzzDecodeWAV(f *testing.F) {
	f.Add(EncodeWAV([]float32{0, 0.5, -0.5}, 16000))
	f.Add(wavFile(3, 2, 48000, 32, make([]byte, 16)))
	f.Add(wavFile(7, 1, 8000, 8, []byte{1, 2, 3}))
	if b, err := os.ReadFile(goforwardRaw); err == nil {
		f.Add(append(wavFile(1, 1, 16000, 16, nil), b[:4000]...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		samples, rate, err := DecodeWAV(b)
		if err != nil {
			return
		}
		if rate < 1 || len(samples) == 0 || len(samples) > len(b) {
			t.Fatalf("rate %d, %d samples from %d bytes", rate, len(samples), len(b))
		}
		if err := CheckFinite(samples); err != nil {
			t.Fatal(err)
		}
	})
}
