package session

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/omniserve/omniserve/internal/audio"
)

// EngineRate is the input rate of the pipeline (stage 0: VAD + ASR) and OutputRate the talker's.
const (
	EngineRate = 16000
	OutputRate = 24000
)

// g711Rate is the only rate G.711 carries on the wire.
const g711Rate = 8000

// errBadAudio is returned for payloads that are not whole samples or not finite.
var errBadAudio = errors.New("bad audio")

// DecodeInput converts one whole wire audio clip (an item's audio) to 16 kHz mono float32. A
// stream of appends goes through an InputDecoder instead, which keeps the resampler's state
// across chunks.
func DecodeInput(data []byte, f AudioFormat) ([]float32, error) {
	var d InputDecoder
	pcm, err := d.Decode(data, f)
	if err != nil {
		return nil, err
	}
	if d.rs != nil {
		pcm = append(pcm, d.rs.Flush(nil)...)
		pcm = pcm[:min(len(pcm), audio.ResampledLen(len(data)/bytesPerSample(f), f.Rate, EngineRate))]
	}
	return pcm, nil
}

// InputDecoder converts a session's stream of wire audio payloads to 16 kHz mono float32. It
// keeps one streaming resampler, so chunk boundaries add no distortion; a change of rate starts
// a new one. The zero value is ready; it is owned by the session actor.
type InputDecoder struct {
	rs *audio.Resampler
}

// Decode converts one payload of the stream. The sample conversions and the resampler are
// internal/speech's; this only picks them by format. It allocates per call: appends arrive at
// most a few dozen times per second per session.
func (d *InputDecoder) Decode(data []byte, f AudioFormat) ([]float32, error) {
	pcm, err := toFloat32(data, f)
	if err != nil {
		return nil, err
	}
	if f.Rate == EngineRate || len(pcm) == 0 {
		return pcm, nil
	}
	if d.rs == nil || !sameRates(d.rs, f.Rate, EngineRate) {
		if d.rs, err = audio.NewResampler(f.Rate, EngineRate); err != nil {
			return nil, fmt.Errorf("%w: %w", errBadAudio, err)
		}
	}
	return d.rs.Process(nil, pcm), nil
}

func sameRates(r *audio.Resampler, from, to int) bool {
	a, b := r.Rates()
	return a == from && b == to
}

func bytesPerSample(f AudioFormat) int {
	switch f.Type {
	case "pcm16":
		return 2
	case "pcm_f32le":
		return 4
	default:
		return 1
	}
}

func toFloat32(data []byte, f AudioFormat) ([]float32, error) {
	var pcm []float32
	switch f.Type {
	case "pcm16":
		var err error
		if pcm, err = audio.PCM16BytesToFloat32(nil, data); err != nil {
			return nil, fmt.Errorf("%w: pcm16 payload has an odd length (%d bytes)", errBadAudio, len(data))
		}
	case "pcm_f32le":
		// speech has no float32-bytes decoder (nothing else reads this wire format).
		if len(data)%4 != 0 {
			return nil, fmt.Errorf("%w: pcm_f32le payload length %d is not a multiple of 4", errBadAudio, len(data))
		}
		pcm = make([]float32, len(data)/4)
		for i := range pcm {
			pcm[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		if err := audio.CheckFinite(pcm); err != nil {
			return nil, fmt.Errorf("%w: %w", errBadAudio, err)
		}
		for i, v := range pcm {
			pcm[i] = max(-1, min(1, v))
		}
	case "g711_ulaw":
		pcm = audio.ULawToFloat32(nil, data)
	case "g711_alaw":
		pcm = audio.ALawToFloat32(nil, data)
	default:
		return nil, fmt.Errorf("%w: unsupported format %q", errBadAudio, f.Type)
	}
	return pcm, nil
}

// EncodeOutput converts one whole clip of 24 kHz float32 talker audio to format f.
func EncodeOutput(pcm []float32, f AudioFormat) []byte {
	if f.Type != "g711_ulaw" && f.Type != "g711_alaw" {
		return audio.Float32ToPCM16Bytes(nil, pcm)
	}
	// 24 kHz → 8 kHz cannot fail: both rates are in audio's range.
	s, err := audio.Resample(pcm, OutputRate, g711Rate)
	if err != nil {
		panic(fmt.Sprintf("session: resampling talker audio: %v", err))
	}
	if f.Type == "g711_ulaw" {
		return audio.Float32ToULaw(nil, s)
	}
	return audio.Float32ToALaw(nil, s)
}

// OutputEncoder converts one response's stream of 24 kHz float32 talker audio to the session's
// output format, keeping the resampler's state across chunks (G.711 is 8 kHz). The zero value
// is ready; one per response, owned by the session actor.
type OutputEncoder struct {
	rs  *audio.Resampler
	buf []float32
}

// Encode converts the next chunk of the stream.
func (e *OutputEncoder) Encode(pcm []float32, f AudioFormat) []byte {
	switch f.Type {
	case "g711_ulaw", "g711_alaw":
		if e.rs == nil {
			// 24 kHz → 8 kHz cannot fail: both rates are in audio's range.
			rs, err := audio.NewResampler(OutputRate, g711Rate)
			if err != nil {
				panic(fmt.Sprintf("session: resampling talker audio: %v", err))
			}
			e.rs = rs
		}
		e.buf = e.rs.Process(e.buf, pcm)
		if f.Type == "g711_ulaw" {
			return audio.Float32ToULaw(nil, e.buf)
		}
		return audio.Float32ToALaw(nil, e.buf)
	default:
		return audio.Float32ToPCM16Bytes(nil, pcm)
	}
}

// OutputBytesPerMs is the byte rate of an output format, used to size pacing frames.
func OutputBytesPerMs(f AudioFormat) float64 {
	if f.Type == "g711_ulaw" || f.Type == "g711_alaw" {
		return 8
	}
	return 48
}
