package speech

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/omniserve/omniserve/internal/audio"
)

// TestOpusRoundTrip: a 440 Hz tone encoded at 48 kHz and decoded at 24 kHz comes back as a tone of
// the same frequency and about the same level, frame by frame.
func TestOpusRoundTrip(t *testing.T) {
	t.Parallel()
	enc, err := NewOpusEncoder(48000, 32000)
	require.NoError(t, err)
	defer enc.Close()
	dec, err := NewOpusDecoder(24000)
	require.NoError(t, err)
	defer dec.Close()
	require.Equal(t, 960, enc.FrameSamples())

	frame := make([]int16, 960)
	pkt := make([]byte, 1500)
	pcm := make([]int16, dec.MaxFrameSamples())
	var out []int16
	for f := range 50 { // 1 s
		for i := range frame {
			n := f*960 + i
			frame[i] = int16(8000 * math.Sin(2*math.Pi*440*float64(n)/48000))
		}
		n, err := enc.Encode(frame, pkt)
		require.NoError(t, err)
		require.Positive(t, n)
		require.Less(t, n, 400, "32 kbit/s is 80 bytes per 20 ms")
		got, err := dec.Decode(pkt[:n], pcm)
		require.NoError(t, err)
		require.Equal(t, 480, got)
		out = append(out, pcm[:got]...)
	}
	tail := out[len(out)/2:] // past the codec's start-up
	var sum float64
	crossings := 0
	for i, v := range tail {
		sum += float64(v) * float64(v)
		if i > 0 && (tail[i-1] < 0) != (v < 0) {
			crossings++
		}
	}
	rms := math.Sqrt(sum / float64(len(tail)))
	require.InDelta(t, 8000/math.Sqrt2, rms, 1500, "level")
	hz := float64(crossings) / 2 / (float64(len(tail)) / 24000)
	require.InDelta(t, 440, hz, 10, "frequency")

	n, err := dec.Decode(nil, pcm) // a lost packet is concealed
	require.NoError(t, err)
	require.Equal(t, 480, n)
	_, err = enc.Encode(frame[:100], pkt)
	require.Error(t, err)
	_, err = dec.Decode([]byte{0xff, 0xff, 0xff}, pcm)
	require.Error(t, err, "garbage is refused, not decoded")
}

// BenchmarkCallCodec is the codec work of one WebRTC call per 20 ms: one 48 kHz frame encoded
// (the answer's audio, in the low-delay mode calls use and in VoIP mode) and one packet decoded
// to 24 kHz (the microphone). ns/op ÷ 20 ms is the share of a core one talking call's Opus takes.
func BenchmarkCallCodec(b *testing.B) {
	for _, m := range []struct {
		name string
		app  OpusApplication
	}{{"lowdelay", OpusLowDelay}, {"voip", OpusVoIP}} {
		b.Run(m.name, func(b *testing.B) {
			enc, err := NewOpusEncoderMode(48000, 32000, m.app)
			require.NoError(b, err)
			defer enc.Close()
			dec, err := NewOpusDecoder(24000)
			require.NoError(b, err)
			defer dec.Close()
			frame := make([]int16, 960)
			for i := range frame {
				frame[i] = int16(6000 * math.Sin(2*math.Pi*220*float64(i)/48000) * (1 + 0.3*math.Sin(float64(i)/37)))
			}
			pkt := make([]byte, 1500)
			pcm := make([]int16, dec.MaxFrameSamples())
			b.ResetTimer()
			for range b.N {
				n, err := enc.Encode(frame, pkt)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := dec.Decode(pkt[:n], pcm); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestOpusLowDelaySpeech: the low-delay mode WebRTC's outbound audio uses has 2.5 ms of lookahead
// (VoIP mode 6.5 ms), and real speech encoded in it at 32 kbit/s and decoded is recognised word
// for word, as in VoIP mode: the 4 ms it saves cost no intelligibility.
func TestOpusLowDelaySpeech(t *testing.T) {
	a := newTestASR(t, 1)
	speech16 := loadRaw(t, goforwardRaw)
	speech48, err := audio.Resample(speech16, 16000, 48000)
	require.NoError(t, err)
	pcm48 := audio.Float32ToInt16(nil, speech48)

	for _, tc := range []struct {
		name      string
		app       OpusApplication
		lookahead int // samples at 48 kHz
	}{
		{"voip", OpusVoIP, 312},
		{"low delay", OpusLowDelay, 120},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc, err := NewOpusEncoderMode(48000, 32000, tc.app)
			require.NoError(t, err)
			defer enc.Close()
			la, err := enc.Lookahead()
			require.NoError(t, err)
			require.Equal(t, tc.lookahead, la, "lookahead in samples at 48 kHz")
			dec, err := NewOpusDecoder(16000)
			require.NoError(t, err)
			defer dec.Close()
			fs := enc.FrameSamples()
			frame := make([]int16, fs)
			pkt := make([]byte, 1500)
			pcm := make([]int16, dec.MaxFrameSamples())
			var out []int16
			for off := 0; off < len(pcm48)+fs; off += fs { // one frame past the end flushes the lookahead
				clear(frame)
				if off < len(pcm48) {
					copy(frame, pcm48[off:])
				}
				n, err := enc.Encode(frame, pkt)
				require.NoError(t, err)
				got, err := dec.Decode(pkt[:n], pcm)
				require.NoError(t, err)
				out = append(out, pcm[:got]...)
			}
			decoded := audio.Int16ToFloat32(nil, out[la/3:]) // aligned with the input
			text, err := a.Transcribe(context.Background(), decoded)
			require.NoError(t, err)
			require.Equal(t, goforwardTxt, text)
			var sig, noise float64
			for i := range min(len(speech16), len(decoded)) {
				sig += float64(speech16[i]) * float64(speech16[i])
				d := float64(decoded[i] - speech16[i])
				noise += d * d
			}
			t.Logf("%s: lookahead %d samples, %q, waveform SNR %.1f dB", tc.name, la, text, 10*math.Log10(sig/noise))
		})
	}
}
