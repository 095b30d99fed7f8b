package session

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
)

// G.711 sample codecs for session_test.go's round trips; they go through internal/speech, the
// one implementation the session uses.
func ulawDecode(b byte) int16 { return int16(audio.ULawToFloat32(nil, []byte{b})[0] * 32768) }
func alawDecode(b byte) int16 { return int16(audio.ALawToFloat32(nil, []byte{b})[0] * 32768) }
func ulawEncode(v int16) byte { return audio.Float32ToULaw(nil, []float32{float32(v) / 32768})[0] }
func alawEncode(v int16) byte { return audio.Float32ToALaw(nil, []float32{float32(v) / 32768})[0] }

func f32le(xs ...float32) []byte {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// sine is n samples of a 440 Hz tone at rate, amplitude 0.5.
func sine(n, rate int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = 0.5 * float32(math.Sin(2*math.Pi*440*float64(i)/float64(rate)))
	}
	return s
}

func rms(xs []float32) float64 {
	var s float64
	for _, x := range xs {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s / float64(len(xs)))
}

func TestDecodeInputFormats(t *testing.T) {
	tone16 := sine(1600, 16000)
	tests := []struct {
		name    string
		data    []byte
		f       AudioFormat
		samples int
		errIs   error
		msg     string
	}{
		{"pcm16 16k", audio.Float32ToPCM16Bytes(nil, tone16), AudioFormat{Type: "pcm16", Rate: 16000}, 1600, nil, ""},
		{"pcm16 24k", audio.Float32ToPCM16Bytes(nil, sine(2400, 24000)), AudioFormat{Type: "pcm16", Rate: 24000}, 1600, nil, ""},
		{"pcm16 48k", audio.Float32ToPCM16Bytes(nil, sine(4800, 48000)), AudioFormat{Type: "pcm16", Rate: 48000}, 1600, nil, ""},
		{"pcm16 odd", []byte{1, 2, 3}, AudioFormat{Type: "pcm16", Rate: 16000}, 0, errBadAudio, "bad audio: pcm16 payload has an odd length (3 bytes)"},
		{"f32 16k", f32le(tone16...), AudioFormat{Type: "pcm_f32le", Rate: 16000}, 1600, nil, ""},
		{"f32 bad length", []byte{0, 0, 0}, AudioFormat{Type: "pcm_f32le", Rate: 16000}, 0, errBadAudio, "bad audio: pcm_f32le payload length 3 is not a multiple of 4"},
		{"f32 nan", f32le(0, float32(math.NaN())), AudioFormat{Type: "pcm_f32le", Rate: 16000}, 0, audio.ErrNonFinite, ""},
		{"f32 inf", f32le(float32(math.Inf(-1))), AudioFormat{Type: "pcm_f32le", Rate: 16000}, 0, errBadAudio, ""},
		{"ulaw 8k", audio.Float32ToULaw(nil, sine(800, 8000)), AudioFormat{Type: "g711_ulaw", Rate: 8000}, 1600, nil, ""},
		{"alaw 8k", audio.Float32ToALaw(nil, sine(800, 8000)), AudioFormat{Type: "g711_alaw", Rate: 8000}, 1600, nil, ""},
		{"unknown", []byte{0, 0}, AudioFormat{Type: "mp3", Rate: 16000}, 0, errBadAudio, `bad audio: unsupported format "mp3"`},
		{"empty", nil, AudioFormat{Type: "pcm16", Rate: 24000}, 0, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pcm, err := DecodeInput(tt.data, tt.f)
			if tt.errIs != nil {
				require.ErrorIs(t, err, tt.errIs)
				require.ErrorIs(t, err, errBadAudio)
				if tt.msg != "" {
					require.EqualError(t, err, tt.msg)
				}
				return
			}
			require.NoError(t, err)
			require.Len(t, pcm, tt.samples)
			if tt.samples > 0 {
				// The tone survives decoding and resampling at its level (0.5/√2), G.711 included.
				require.InDelta(t, 0.5/math.Sqrt2, rms(pcm[100:len(pcm)-100]), 0.02)
			}
		})
	}
	// Out-of-range float samples are clipped, not rejected.
	pcm, err := DecodeInput(f32le(2, -3), AudioFormat{Type: "pcm_f32le", Rate: 16000})
	require.NoError(t, err)
	require.Equal(t, []float32{1, -1}, pcm)
}

func TestEncodeOutputFormats(t *testing.T) {
	tone := sine(2400, OutputRate) // 100 ms, one pacing frame
	tests := []struct {
		name  string
		f     AudioFormat
		bytes int
		back  func([]byte) []float32
	}{
		{"pcm16", AudioFormat{Type: "pcm16", Rate: 24000}, 4800, func(b []byte) []float32 {
			pcm, err := audio.PCM16BytesToFloat32(nil, b)
			require.NoError(t, err)
			return pcm
		}},
		{"ulaw", AudioFormat{Type: "g711_ulaw", Rate: 8000}, 800, func(b []byte) []float32 { return audio.ULawToFloat32(nil, b) }},
		{"alaw", AudioFormat{Type: "g711_alaw", Rate: 8000}, 800, func(b []byte) []float32 { return audio.ALawToFloat32(nil, b) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := EncodeOutput(tone, tt.f)
			require.Len(t, b, tt.bytes)
			require.InDelta(t, float64(tt.bytes)/100, OutputBytesPerMs(tt.f), 1e-9, "pacing rate matches the encoding")
			back := tt.back(b)
			require.InDelta(t, 0.5/math.Sqrt2, rms(back[len(back)/10:len(back)*9/10]), 0.02)
		})
	}
}

// A session's append stream goes through one resampler: 20 ms chunks at 8 kHz (telephony), 24
// and 44.1 kHz decode to the 16 kHz sine they carry, with no distortion at chunk boundaries
// (each chunk resampled alone was off by up to 0.244 at 8 kHz).
func TestInputDecoderStreamsAcrossChunks(t *testing.T) {
	for _, rate := range []int{8000, 11025, 24000, 44100, 48000} {
		t.Run(fmt.Sprint(rate), func(t *testing.T) {
			t.Parallel()
			in := sine(rate/2, rate) // 0.5 s, 0.5 peak
			data := audio.Float32ToPCM16Bytes(nil, in)
			var d InputDecoder
			var got []float32
			per := 2 * (rate / 50) // 20 ms of pcm16
			for off := 0; off < len(data); off += per {
				pcm, err := d.Decode(data[off:min(off+per, len(data))], AudioFormat{Type: "pcm16", Rate: rate})
				require.NoError(t, err)
				got = append(got, pcm...)
			}
			worst := 0.0
			for i := 80; i < len(got)-80; i++ {
				want := 0.5 * math.Sin(2*math.Pi*440*float64(i)/EngineRate)
				worst = max(worst, math.Abs(float64(got[i])-want))
			}
			t.Logf("%d Hz in 20 ms chunks: max error %.2e", rate, worst)
			require.Less(t, worst, 2e-3)
		})
	}
}

// A response's G.711 output streamed in 100 ms frames equals the one-shot encoding of the
// whole clip (apart from the filter's held-back tail).
func TestOutputEncoderStreams(t *testing.T) {
	pcm := sine(OutputRate, OutputRate)
	f := AudioFormat{Type: "g711_ulaw", Rate: 8000}
	whole := EncodeOutput(pcm, f)
	var e OutputEncoder
	var got []byte
	for off := 0; off < len(pcm); off += 2400 {
		got = append(got, e.Encode(pcm[off:min(off+2400, len(pcm))], f)...)
	}
	require.Greater(t, len(got), len(whole)-16)
	require.Equal(t, whole[:len(got)], got)
}
